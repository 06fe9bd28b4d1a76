// A ragged op's way into CommImpl (api/ragged.h): this rank's records, their exchange, and the
// v-collective they define, planned once the exchange has finished.
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "api/comm_impl.h"
#include "api/ragged.h"
#include "api/shape.h"
#include "common/error.h"
#include "device/device_memory.h"
#include "reduce/reduce.h"

namespace prioccl::detail {

namespace {

// The exchange's key when the op is named: its own, so that it never meets a user's op.
constexpr const char* kRowsKeyPrefix = "prioccl.rows/";

// The second op's plan, run by CommImpl::enter once the exchange (op.after) has finished.
struct RowsPlan {
  const char* what;
  int rank, size;
  std::vector<size_t> sendCounts;  // an all-to-all's, in elements
  std::shared_ptr<RowsResult> result;

  bool operator()(OpState& op) const {
    const std::shared_ptr<OpState> sizes = std::move(op.after);
    if (sizes->result != priocclSuccess) {
      op.finish(sizes->result, concat(what, ": the exchange of rows failed: ", sizes->error));
      return false;
    }
    try {
      std::vector<RowRecord> records(static_cast<size_t>(size));
      std::memcpy(records.data(), sizes->recv, records.size() * sizeof(RowRecord));
      const std::vector<size_t> counts = rowCounts(what, records);
      size_t total = 0;
      for (size_t c : counts) total += c;
      result->rows.clear();
      for (const RowRecord& r : records) result->rows.push_back(r.rows);
      result->data.resize(total * reduce::dtypeSize(op.dtype));
      const bool gather = op.kind == OpState::Kind::kAllGatherV;
      const OpDesc v =
          collectiveVOp(op.kind, op.send, result->data.data(), gather ? nullptr : sendCounts.data(),
                        nullptr, counts.data(), nullptr, op.dtype, priocclSum, op.priority);
      CommImpl::fillCollectiveV(op, v, rank, size);
      op.recv = result->data.data();
      return true;
    } catch (const Error& e) {
      op.finish(e.code(), e.what());
    } catch (const std::bad_alloc&) {
      op.finish(priocclSystemError, concat(what, ": out of memory for the result"));
    }
    return false;
  }
};

}  // namespace

Request CommImpl::submitRows(const OpDesc& d, Rows* result) {
  using Kind = OpState::Kind;
  const uint64_t shape = shape::takeNext();  // taken first: a failing call must not leave it
  validateEnums(d.dtype, d.op);
  const bool gather = d.kind == Kind::kAllGatherV;
  const char* what = gather ? "allgather (rows)" : "alltoall (rows)";
  if (!result) fail(priocclInvalidArgument, what, ": result is null");
  OwnRows own = ownRows(what, d, size_, shape);
  if (deviceCollectives_)
    fail(priocclInvalidUsage, what,
         ": not with PRIOCCL_TRANSPORT=nccl (its result is host memory, which NCCL cannot take; "
         "exchange the sizes and call the v-collective)");
  device::DeviceMemory* memory = device::current();
  if (memory && d.send && memory->isDevice(d.send))
    fail(priocclInvalidArgument, what,
         ": sendbuff is device memory; the ragged ops take host "
         "memory");

  // The exchange: this rank's records out, one per rank (or from each rank) in.
  const size_t sent = own.records.size(), p = static_cast<size_t>(size_);
  auto sizes =
      makeOp(nullptr, nullptr, sizeof(RowRecord) / sizeof(uint64_t), priocclUint64, priocclSum);
  sizes->kind = gather ? Kind::kAllGather : Kind::kAllToAll;
  sizes->ownBuffer.resize((sent + p) * sizeof(RowRecord));
  std::memcpy(sizes->ownBuffer.data(), own.records.data(), sent * sizeof(RowRecord));
  sizes->send = sizes->ownBuffer.data();
  sizes->recv = sizes->ownBuffer.data() + sent * sizeof(RowRecord);
  // The second op: the v-collective, planned when the exchange has finished.
  auto data = makeOp(d.send, nullptr, 0, d.dtype, priocclSum);
  data->kind = d.kind;
  auto rows = std::make_shared<RowsResult>();
  data->after = sizes;
  data->prepare = RowsPlan{what, rank_, size_, std::move(own.sendCounts), rows};
  for (OpState* op : {sizes.get(), data.get()}) {
    op->priority = d.priority;
    op->named = d.named;
    op->errorLog = errors_;
  }
  if (d.named) {
    sizes->key = concat(kRowsKeyPrefix, d.key);
    data->key = std::string(d.key);
  }
  // The exchange wakes the door when it ends (the door holds the second op until then).
  sizes->callbacks.push_back(
      [bell = streamGate_->bell()](priocclResult_t, const std::string&) { bell->ring(); });
  std::lock_guard<std::mutex> lock(mutex_);  // both in, next to each other
  requireLive();
  submitOrDefer(sizes, false);
  submitOrDefer(data, false);
  *result = Rows(data, rows);
  return Request(data);
}

}  // namespace prioccl::detail
