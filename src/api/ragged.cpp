// The ragged collectives' rules (ragged.h).
#include "api/ragged.h"

#include <string>

#include "common/error.h"
#include "reduce/reduce.h"

namespace prioccl::detail {

namespace {
// "[a, b, c]" of the records' field `f` (rendered by `name`).
template <typename F>
std::string byRank(const std::vector<RowRecord>& records, F&& name) {
  std::string out = "[";
  for (size_t k = 0; k < records.size(); ++k) out += concat(k ? ", " : "", name(records[k]));
  return out + "]";
}
}  // namespace

OwnRows ownRows(const char* what, const OpDesc& d, int size, uint64_t shape) {
  const bool gather = d.kind == OpState::Kind::kAllGatherV;
  const size_t p = static_cast<size_t>(size);
  if (!gather && !d.sendCounts) fail(priocclInvalidArgument, what, ": sendRows is null");
  OwnRows own;
  // A failed rank says so in every record (an all-to-all's every send row), and nothing else.
  own.failed = gather ? d.count == kRowsFailed : d.sendCounts[0] == kRowsFailed;
  for (size_t j = 1; !gather && j < p; ++j)
    if ((d.sendCounts[j] == kRowsFailed) != own.failed)
      fail(priocclInvalidArgument, what, ": sendRows[", j, "] = ", d.sendCounts[j],
           " but sendRows[0] = ", d.sendCounts[0],
           " (PRIOCCL_ROWS_FAILED goes in every entry or none)");
  if (own.failed) {
    RowRecord failed;
    failed.rows = kRowsFailed;
    own.records.assign(gather ? 1 : p, failed);
    return own;
  }
  const size_t elem = reduce::dtypeSize(d.dtype);
  if (d.rowCount > SIZE_MAX / elem)
    fail(priocclInvalidArgument, what, ": rowCount ", d.rowCount, " of ",
         reduce::dtypeName(d.dtype), " overflows the address space");
  const size_t rowLimit = d.rowCount ? SIZE_MAX / elem / d.rowCount : SIZE_MAX;
  RowRecord record;
  record.rowCount = d.rowCount;
  record.dtype = static_cast<uint64_t>(enumBits(d.dtype));
  record.shape = shape;
  size_t total = 0;  // rows this rank sends
  const size_t sends = gather ? 1 : p;
  for (size_t j = 0; j < sends; ++j) {
    const size_t rows = gather ? d.count : d.sendCounts[j];
    if (rows > rowLimit - total)
      fail(priocclInvalidArgument, what, ": ", gather ? "rows " : concat("sendRows[", j, "] = "),
           rows, " of ", d.rowCount, " ", reduce::dtypeName(d.dtype),
           " elements overflow the address space");
    total += rows;
    record.rows = rows;
    own.records.push_back(record);
    if (!gather) own.sendCounts.push_back(rows * d.rowCount);
  }
  if (total * d.rowCount > 0 && !d.send)
    fail(priocclInvalidArgument, what, ": sendbuff is null with ", total, " rows of ", d.rowCount,
         " elements");
  return own;
}

std::vector<size_t> rowCounts(const char* what, const std::vector<RowRecord>& records) {
  std::string failed;
  for (size_t k = 0; k < records.size(); ++k)
    if (records[k].rows == kRowsFailed) failed += concat(failed.empty() ? "" : ", ", k);
  if (!failed.empty())
    fail(priocclInvalidArgument, what, ": rank(s) [", failed,
         "] failed before the op (their error says why)");
  const RowRecord& first = records.front();
  for (const RowRecord& r : records)
    if (r.dtype != first.dtype)
      fail(priocclInvalidArgument, what, ": ranks differ in dtype (by rank: ",
           byRank(records,
                  [](const RowRecord& x) {
                    return reduce::dtypeName(static_cast<priocclDataType_t>(x.dtype));
                  }),
           ")");
  for (const RowRecord& r : records)
    if (r.rowCount != first.rowCount || r.shape != first.shape)
      fail(priocclInvalidArgument, what,
           ": ranks differ in the dimensions after the first (elements per row by rank: ",
           byRank(records, [](const RowRecord& x) { return x.rowCount; }),
           "); only the first dimension may differ");
  std::vector<size_t> counts;
  size_t total = 0;
  const size_t elem = reduce::dtypeSize(static_cast<priocclDataType_t>(first.dtype));
  for (const RowRecord& r : records) {
    // Each rank checked its own rows; their sum may still overflow.
    if (r.rowCount && r.rows > (SIZE_MAX / elem - total) / r.rowCount)
      fail(priocclInvalidArgument, what, ": the rows of all ranks (", r.rows, " from rank ",
           counts.size(), " and more) overflow the address space");
    counts.push_back(r.rows * r.rowCount);
    total += counts.back();
  }
  return counts;
}

}  // namespace prioccl::detail
