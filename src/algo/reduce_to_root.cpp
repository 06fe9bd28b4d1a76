#include "algo/reduce_to_root.h"

#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {

int ReduceChunk::steps(int nranks) {
  int rounds = 0;
  while ((1 << rounds) < nranks) ++rounds;
  return rounds > 1 ? rounds : 1;  // the binomial root's children; the chain's one
}

ReduceChunk::ReduceChunk(const ChunkSpec& spec, ScratchPool& pool, int root, RootTree::Shape shape)
    : spec_(spec),
      pool_(pool),
      bytes_(spec.count * reduce::dtypeSize(spec.dtype)),
      parent_(RootTree::parent(shape, spec.rank, root, spec.nranks)),
      children_(RootTree::children(shape, spec.rank, root, spec.nranks)),
      incoming_(children_.size()),
      arrived_(children_.size(), false),
      acc_(spec.recv) {
  if (parent_ >= 0) {
    acc_ = nullptr;
    place_ = RootTree::place(shape, spec.rank, root, spec.nranks);
  }
  if (parent_ >= 0 && !children_.empty()) {
    partial_ = pool_.take();
    acc_ = partial_.get();
  }
  // A root without children (one rank) reduces its one contribution: a copy (Avg divides by 1).
  if (parent_ < 0 && children_.empty() && spec.send != spec.recv)
    std::memcpy(spec.recv, spec.send, bytes_);
}

ReduceChunk::~ReduceChunk() {
  pool_.give(std::move(partial_));
  for (ScratchPool::Block& b : incoming_) pool_.give(std::move(b));  // a chunk that failed
}

Transfer ReduceChunk::takeRecv() {
  size_t i = posted_++;
  incoming_[i] = pool_.take();
  Transfer t;
  t.peer = children_[i];
  t.step = static_cast<int>(i);  // the child's place among this rank's children
  t.buf = incoming_[i].get();
  t.bytes = bytes_;
  return t;
}

void ReduceChunk::recvDone(int step) {
  arrived_[static_cast<size_t>(step)] = true;  // any order
  // Reduce the children in their fixed order, as far as they have arrived.
  while (reduced_ < children_.size() && arrived_[reduced_]) {
    const void* local = reduced_ == 0 ? spec_.send : acc_;
    bool last = reduced_ + 1 == children_.size();
    int divisor = (last && parent_ < 0 && spec_.op == priocclAvg) ? spec_.nranks : 1;
    reduce::apply(acc_, incoming_[reduced_].get(), local, spec_.count, spec_.dtype, spec_.op,
                  divisor);
    pool_.give(std::move(incoming_[reduced_]));
    ++reduced_;
  }
}

Transfer ReduceChunk::takeSend() {
  sendPosted_ = true;
  Transfer t;
  t.peer = parent_;
  t.step = place_;
  // A leaf passes its contribution as it is.
  t.buf = children_.empty() ? const_cast<void*>(spec_.send) : acc_;
  t.bytes = bytes_;
  return t;
}

}  // namespace prioccl
