// The argument rules of the collectives: what one rank can check alone, before the op exists
// (the other ranks' arguments are compared when the op is matched, core/op_matcher.h). Plain
// values in, checked extents out, an Error (priocclInvalidArgument) naming the collective and the
// argument otherwise: no communicator, no MPI, so every rule is unit-tested on its own
// (tests/unit/test_op_rules.cpp).
#pragma once

#include <cstddef>
#include <vector>

#include "core/op.h"
#include "prioccl/prioccl.h"

namespace prioccl::detail {

// Throws InvalidArgument unless both are among the enums' declared values (before any C++ load of
// possibly invalid enum values from the C ABI).
void validateEnums(const priocclDataType_t& dtype, const priocclRedOp_t& op);

// A collective of one count: an all-reduce, a broadcast from `root`, a reduce to `root`, an
// all-gather (count: each rank's), a reduce-scatter (count: each rank's result), an all-to-all
// (count: each block's; never in place) or a barrier (count 0).
struct CollectiveArgs {
  OpState::Kind kind = OpState::Kind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  priocclDataType_t dtype = priocclFloat32;
  int root = -1;  // broadcast and reduce only
};

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

CollectiveExtents checkCollective(const CollectiveArgs& args, int rank, int size);

// A v-collective (per-rank counts, MPI's semantics): an all-gather-v (recvCounts, recvDispls;
// sendbuf holds recvCounts[rank] elements), a reduce-scatter-v (sendbuf holds the blocks of
// recvCounts, packed; recvbuf gets recvCounts[rank]) or an all-to-all-v (all four). Null
// displacements mean packed blocks; every count array holds `size` entries.
struct CollectiveVArgs {
  OpState::Kind kind = OpState::Kind::kAllGatherV;
  const void* send = nullptr;
  void* recv = nullptr;
  const size_t* sendCounts = nullptr;
  const size_t* sendDispls = nullptr;
  const size_t* recvCounts = nullptr;
  const size_t* recvDispls = nullptr;
  priocclDataType_t dtype = priocclFloat32;
};

// The layout copied from the caller's arrays (OpState's fields of the same names: an all-gather-v
// fills recv*, a reduce-scatter-v send* with the blocks of recvcounts, an all-to-all-v both), the
// elements this rank sends and receives, and the largest count (OpState::count).
struct CollectiveVLayout {
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
  size_t sendElems = 0, recvElems = 0, largest = 0;
};

CollectiveVLayout checkCollectiveV(const CollectiveVArgs& args, int rank, int size);

}  // namespace prioccl::detail
