// Reduce of one chunk to a root as a step machine (ncclReduce): data flows up a RootTree
// (root_tree.h). Each rank receives its children's partial results, reduces them into its own
// contribution in the children's fixed order (so the result is the same bits whatever order
// they arrive in), then sends the partial result to its parent; the root's ends in its receive
// buffer. A leaf sends its send buffer as it is.
//
// Only the root's receive buffer is written. Scratch from `pool` (blocks of at least the chunk's
// bytes): one per child for what arrives, and on a non-root rank with children one for the
// partial result.
#pragma once

#include <cstddef>
#include <vector>

#include "algo/chunk_algo.h"
#include "algo/root_tree.h"
#include "common/scratch_pool.h"

namespace prioccl {

class ReduceChunk final : public ChunkAlgo {
 public:
  ReduceChunk(const ChunkSpec& spec, ScratchPool& pool, int root, RootTree::Shape shape);
  ~ReduceChunk() override;  // gives its blocks back to the pool
  // Distinct step ids of one chunk: a child's message to its parent has the child's place among
  // the parent's children as its step.
  static int steps(int nranks);

  bool sendReady() const override {
    return parent_ >= 0 && !sendPosted_ && reduced_ == children_.size();
  }
  Transfer takeSend() override;
  bool recvReady() const override { return posted_ < children_.size(); }
  Transfer takeRecv() override;
  void sendDone(int) override { sent_ = true; }
  void recvDone(int step) override;
  bool finished() const override { return reduced_ == children_.size() && (parent_ < 0 || sent_); }

 private:
  ChunkSpec spec_;
  ScratchPool& pool_;
  size_t bytes_;
  int parent_;
  std::vector<int> children_;
  std::vector<ScratchPool::Block> incoming_;  // per child
  std::vector<bool> arrived_;
  ScratchPool::Block partial_;  // a non-root rank with children: its partial result
  void* acc_;                   // where the partial result builds up (the root: spec.recv)
  int place_ = 0;               // this rank's place among its parent's children: its send's step
  size_t posted_ = 0;           // receives taken
  size_t reduced_ = 0;          // children reduced, in order
  bool sendPosted_ = false, sent_ = false;
};

}  // namespace prioccl
