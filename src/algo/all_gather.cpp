#include "algo/all_gather.h"

#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {

AllGatherChunk::AllGatherChunk(const ChunkSpec& spec)
    : spec_(spec),
      p_(spec.nranks),
      r_(spec.rank),
      last_(spec.nranks - 1),
      bytes_(spec.count * reduce::dtypeSize(spec.dtype)),
      arrived_(static_cast<size_t>(spec.nranks), false) {
  // In place, this rank's slice is already in its block.
  if (spec.send != block(r_)) std::memcpy(block(r_), spec.send, bytes_);
}

unsigned char* AllGatherChunk::block(int rank) const {
  size_t elem = reduce::dtypeSize(spec_.dtype);
  return static_cast<unsigned char*>(spec_.recv) +
         static_cast<size_t>(rank) * spec_.blockStride * elem;
}

// Step s: rank r passes block r - s to r + 1 (its own first, then what arrived at step s - 1).
Transfer AllGatherChunk::takeSend() {
  int s = sendsPosted_++;
  Transfer t;
  t.peer = mod(r_ + 1);
  t.step = s;
  t.buf = block(mod(r_ - s));
  t.bytes = bytes_;
  return t;
}

// ... and receives block r - s - 1 from r - 1.
Transfer AllGatherChunk::takeRecv() {
  int s = recvsPosted_++;
  Transfer t;
  t.peer = mod(r_ - 1);
  t.step = s;
  t.buf = block(mod(r_ - s - 1));
  t.bytes = bytes_;
  return t;
}

void AllGatherChunk::recvDone(int step) {
  arrived_[static_cast<size_t>(step)] = true;
  ++recvsDone_;
}

}  // namespace prioccl
