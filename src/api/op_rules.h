// The argument rules of the collectives: what one rank can check alone, before the op exists
// (the other ranks' arguments are compared when the op is matched, core/op_matcher.h). Plain
// values in, checked extents out, an Error (priocclInvalidArgument) naming the collective and the
// argument otherwise: no communicator, no MPI, so every rule is unit-tested on its own
// (tests/unit/test_op_rules.cpp).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include "core/op.h"
#include "prioccl/prioccl.h"

namespace prioccl::detail {

// Throws InvalidArgument unless both are among the enums' declared values (before any C++ load of
// possibly invalid enum values from the C ABI).
void validateEnums(const priocclDataType_t& dtype, const priocclRedOp_t& op);

// One op as an entry point describes it, C and C++ alike, before any check: the fields its kind
// does not use keep their defaults. Made by the functions below, one per family of kinds.
struct OpDesc {
  OpState::Kind kind = OpState::Kind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // one-count kinds, send and recv
  // v-kinds: per-rank counts and displacements (null displacements: packed blocks).
  const size_t* sendCounts = nullptr;
  const size_t* sendDispls = nullptr;
  const size_t* recvCounts = nullptr;
  const size_t* recvDispls = nullptr;
  // May hold values outside their enums (from the C ABI) until validateEnums has read them.
  priocclDataType_t dtype = priocclFloat32;
  priocclRedOp_t op = priocclSum;  // the reducing kinds only
  int root = -1;                   // broadcast and reduce
  int peer = -1, tag = 0;          // send and recv
  // The ragged kinds (api/ragged.h): elements per row; `count` (all-gather) and `sendCounts`
  // (all-to-all) are then in rows.
  size_t rowCount = 0;
  int priority = 0;
  bool named = false;
  std::string_view key;  // a named op's name: every rank submits it under the same one
};

// A collective of one count: an all-reduce, a broadcast from `root`, a reduce to `root`, an
// all-gather (count: each rank's), a reduce-scatter (count: each rank's result), an all-to-all
// (count: each block's; never in place) or a barrier (count 0). `op` is ignored by the kinds
// that do not reduce, `root` by those without one.
OpDesc collectiveOp(OpState::Kind kind, const void* send, void* recv, size_t count,
                    const priocclDataType_t& dtype, const priocclRedOp_t& op = priocclSum,
                    int root = -1, int priority = 0);
// A v-collective (per-rank counts, MPI's semantics): an all-gather-v (recvCounts, recvDispls;
// sendbuf holds recvCounts[rank] elements), a reduce-scatter-v (sendbuf holds the blocks of
// recvCounts, packed; recvbuf gets recvCounts[rank]) or an all-to-all-v (all four). Every count
// array holds `size` entries.
OpDesc collectiveVOp(OpState::Kind kind, const void* send, void* recv, const size_t* sendCounts,
                     const size_t* sendDispls, const size_t* recvCounts, const size_t* recvDispls,
                     const priocclDataType_t& dtype, const priocclRedOp_t& op = priocclSum,
                     int priority = 0);
// A send (buf read) or a receive (buf written) of `count` elements with `peer`.
OpDesc pointToPointOp(OpState::Kind kind, const void* buf, size_t count,
                      const priocclDataType_t& dtype, int peer, int tag, int priority);
// A ragged op (api/ragged.h): an all-gather (kind kAllGatherV) of this rank's `rows` rows, or an
// all-to-all (kAllToAllV) of sendRows[j] rows to rank j, packed in rank order; each row holds
// `rowCount` elements.
OpDesc rowsOp(OpState::Kind kind, const void* send, size_t rows, const size_t* sendRows,
              size_t rowCount, const priocclDataType_t& dtype, int priority);
// `d` as a named op.
inline OpDesc named(OpDesc d, std::string_view key) {
  d.named = true;
  d.key = key;
  return d;
}

// Which check an op's kind takes: checkCollective, checkCollectiveV, or the point-to-point rules.
enum class OpFamily { kCollective, kCollectiveV, kPointToPoint };
OpFamily familyOf(OpState::Kind kind);

// What this rank reads and writes. As NCCL's: only a broadcast's root reads its send buffer, only
// a reduce's root writes its receive buffer; the others' buffers are ignored (null here, and 0
// bytes). In place: the same pointer, or for an all-gather sendbuf at this rank's block of
// recvbuf, for a reduce-scatter recvbuf at this rank's block of sendbuf.
struct CollectiveExtents {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t sendBytes = 0, recvBytes = 0;
  int root = -1;  // a broadcast's or reduce's root; -1 for the other kinds
};

// The rules of a one-count collective.
CollectiveExtents checkCollective(const OpDesc& d, int rank, int size);

// The layout copied from the caller's arrays (OpState's fields of the same names: an all-gather-v
// fills recv*, a reduce-scatter-v send* with the blocks of recvcounts, an all-to-all-v both), the
// elements this rank sends and receives, and the largest count (OpState::count).
struct CollectiveVLayout {
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
  size_t sendElems = 0, recvElems = 0, largest = 0;
};

// The rules of a v-collective.
CollectiveVLayout checkCollectiveV(const OpDesc& d, int rank, int size);

// The rules of a send or receive with this rank's own arguments (the tag's range is the
// engine's: CommImpl checks it).
void checkPointToPoint(const OpDesc& d, int rank, int size);

}  // namespace prioccl::detail
