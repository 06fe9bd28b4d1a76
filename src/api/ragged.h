// The ragged collectives (Horovod's allgather, and its alltoall with splits): each rank knows
// only its own first dimension, and the rows it receives from every rank are learned inside the
// op, so the caller makes one call and waits for nothing before it.
//
// Such an op runs as two ops the engine already has. First a small exchange of one record per
// rank (all-gather) or per pair (all-to-all): the rows, the elements per row, the dtype and the
// digest of the dimensions after the first. Then the v-collective those records define, into a
// buffer the library owns (RowsResult), read by the caller once the op has finished. The second
// enters the engine only once the first has finished: the communicator's door (stream_gate.h)
// holds it, and every op behind it, so that unnamed ops still match by submission order. Every
// rank derives its counts, or the same error, from the same records, so either every rank runs
// the second op or none does.
//
// This file holds the rules, pure (unit.test_ragged); comm_ragged.cpp submits the two ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "api/op_rules.h"

namespace prioccl::detail {

// One rank's record, as the exchange carries it (four uint64 elements). rows == kRowsFailed:
// the rank failed before the op and takes part only so that the others fail too.
struct RowRecord {
  uint64_t rows = 0, rowCount = 0, dtype = 0, shape = 0;
};
static_assert(sizeof(RowRecord) == 4 * sizeof(uint64_t), "wire layout");
constexpr uint64_t kRowsFailed = UINT64_MAX;  // PRIOCCL_ROWS_FAILED

// The result of a ragged op, owned by the library: every rank's rows, packed in rank order, and
// the rows that came from each rank. Sized when the second op is planned, written by it.
struct RowsResult {
  std::vector<unsigned char> data;
  std::vector<size_t> rows;
};

// This rank's side of a ragged op, from its descriptor (rowsOp), after the rules it can check
// alone: its records (all-gather: one; all-to-all: one per peer, in rank order) and, for an
// all-to-all, the elements it sends each rank. A failed rank's records say so (every other field
// 0), whatever else it passed. Throws InvalidArgument naming `what` and the argument.
struct OwnRows {
  std::vector<RowRecord> records;
  std::vector<size_t> sendCounts;
  bool failed = false;
};
OwnRows ownRows(const char* what, const OpDesc& d, int size, uint64_t shape);

// The elements that come from each rank, from the records this rank received (all-gather: rank
// k's; all-to-all: the one rank k sent this rank). Every rank sees every rank's elements per row,
// dtype and shape digest, so all of them raise alike: InvalidArgument naming `what` when a rank
// failed before the op, when dtypes differ, or when the dimensions after the first do.
std::vector<size_t> rowCounts(const char* what, const std::vector<RowRecord>& records);

}  // namespace prioccl::detail
