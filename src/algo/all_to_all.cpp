#include "algo/all_to_all.h"

#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {

AllToAllChunk::AllToAllChunk(const ChunkSpec& spec)
    : spec_(spec),
      p_(spec.nranks),
      r_(spec.rank),
      last_(spec.nranks - 1),
      bytes_(spec.count * reduce::dtypeSize(spec.dtype)) {
  std::memcpy(static_cast<unsigned char*>(spec.recv) + offset(r_),
              static_cast<const unsigned char*>(spec.send) + offset(r_), bytes_);
}

size_t AllToAllChunk::offset(int block) const {
  return static_cast<size_t>(block) * spec_.blockStride * reduce::dtypeSize(spec_.dtype);
}

// Step s - 1 (s = 1 .. p - 1): the block for rank r + s, to it.
Transfer AllToAllChunk::takeSend() {
  int s = ++sendsPosted_;
  Transfer t;
  t.peer = mod(r_ + s);
  t.step = s - 1;
  t.buf =
      const_cast<unsigned char*>(static_cast<const unsigned char*>(spec_.send) + offset(t.peer));
  t.bytes = bytes_;
  return t;
}

// ... and rank r - s's block for r, into its place.
Transfer AllToAllChunk::takeRecv() {
  int s = ++recvsPosted_;
  Transfer t;
  t.peer = mod(r_ - s);
  t.step = s - 1;
  t.buf = static_cast<unsigned char*>(spec_.recv) + offset(t.peer);
  t.bytes = bytes_;
  return t;
}

}  // namespace prioccl
