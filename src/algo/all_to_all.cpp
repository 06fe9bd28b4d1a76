#include "algo/all_to_all.h"

#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {

AllToAllChunk::AllToAllChunk(const ChunkSpec& spec)
    : spec_(spec), p_(spec.nranks), r_(spec.rank), last_(spec.nranks - 1) {
  // This rank's block for itself (an all-to-all-v's send and receive counts for it are equal).
  ChunkSpec::Slice from = sendSlice(r_), to = recvSlice(r_);
  if (to.bytes) std::memcpy(to.at, from.at, to.bytes);
}

ChunkSpec::Slice AllToAllChunk::sendSlice(int peer) const {
  return spec_.slice(spec_.sendBlocks, spec_.send, peer, reduce::dtypeSize(spec_.dtype));
}

ChunkSpec::Slice AllToAllChunk::recvSlice(int peer) const {
  return spec_.slice(spec_.recvBlocks, spec_.recv, peer, reduce::dtypeSize(spec_.dtype));
}

// Step s - 1 (s = 1 .. p - 1): the block for rank r + s, to it.
Transfer AllToAllChunk::takeSend() {
  int s = ++sendsPosted_;
  Transfer t;
  t.peer = mod(r_ + s);
  t.step = s - 1;
  ChunkSpec::Slice b = sendSlice(t.peer);
  t.buf = b.at;
  t.bytes = b.bytes;
  return t;
}

// ... and rank r - s's block for r, into its place.
Transfer AllToAllChunk::takeRecv() {
  int s = ++recvsPosted_;
  Transfer t;
  t.peer = mod(r_ - s);
  t.step = s - 1;
  ChunkSpec::Slice b = recvSlice(t.peer);
  t.buf = b.at;
  t.bytes = b.bytes;
  return t;
}

}  // namespace prioccl
