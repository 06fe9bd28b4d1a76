#include "algo/all_gather.h"

#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {

AllGatherChunk::AllGatherChunk(const ChunkSpec& spec)
    : spec_(spec),
      p_(spec.nranks),
      r_(spec.rank),
      last_(spec.nranks - 1),
      arrived_(static_cast<size_t>(spec.nranks), false) {
  // In place, this rank's slice is already in its block.
  ChunkSpec::Slice own = block(r_);
  if (own.bytes && spec.send != own.at) std::memcpy(own.at, spec.send, own.bytes);
}

ChunkSpec::Slice AllGatherChunk::block(int rank) const {
  return spec_.slice(spec_.recvBlocks, spec_.recv, rank, reduce::dtypeSize(spec_.dtype));
}

// Step s: rank r passes block r - s to r + 1 (its own first, then what arrived at step s - 1).
Transfer AllGatherChunk::takeSend() {
  int s = sendsPosted_++;
  Transfer t;
  t.peer = mod(r_ + 1);
  t.step = s;
  ChunkSpec::Slice b = block(mod(r_ - s));
  t.buf = b.at;
  t.bytes = b.bytes;
  return t;
}

// ... and receives block r - s - 1 from r - 1.
Transfer AllGatherChunk::takeRecv() {
  int s = recvsPosted_++;
  Transfer t;
  t.peer = mod(r_ - 1);
  t.step = s;
  ChunkSpec::Slice b = block(mod(r_ - s - 1));
  t.buf = b.at;
  t.bytes = b.bytes;
  return t;
}

void AllGatherChunk::recvDone(int step) {
  arrived_[static_cast<size_t>(step)] = true;
  ++recvsDone_;
}

}  // namespace prioccl
