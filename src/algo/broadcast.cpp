#include "algo/broadcast.h"

#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {

BroadcastChunk::BroadcastChunk(const ChunkSpec& spec, int root, RootTree::Shape shape)
    : data_(spec.recv),
      bytes_(spec.count * reduce::dtypeSize(spec.dtype)),
      parent_(RootTree::parent(shape, spec.rank, root, spec.nranks)),
      children_(RootTree::children(shape, spec.rank, root, spec.nranks)),
      have_(spec.rank == root) {
  if (have_ && spec.send != spec.recv) std::memcpy(spec.recv, spec.send, bytes_);
}

Transfer BroadcastChunk::takeSend() {
  Transfer t;
  t.peer = children_[next_++];
  t.step = 0;
  t.buf = data_;
  t.bytes = bytes_;
  return t;
}

Transfer BroadcastChunk::takeRecv() {
  recvPosted_ = true;
  Transfer t;
  t.peer = parent_;
  t.step = 0;
  t.buf = data_;
  t.bytes = bytes_;
  t.exact = true;  // every rank cuts the op alike only when all agree on its size
  return t;
}

}  // namespace prioccl
