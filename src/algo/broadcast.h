// Broadcast of one chunk from a root as a step machine: every rank but the root receives the
// chunk from its parent, then passes it on to its children. Two shapes:
// - a chain in rank order from the root: each link carries the data once, so consecutive chunks
//   pipeline down the chain at link speed (large ops);
// - a binomial tree: ceil(log2 p) hops, the largest subtree served first (small ops).
// As NCCL's ncclBroadcast: only the root's send buffer is read, and the root's receive buffer gets
// the data too (copied when it is not the send buffer). No scratch, no reduction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algo/chunk_algo.h"

namespace prioccl {

class BroadcastChunk final : public ChunkAlgo {
 public:
  enum class Shape { kChain, kBinomial };

  BroadcastChunk(const ChunkSpec& spec, int root, Shape shape);

  // The shape for an op cut into `chunks` chunks, from arguments every rank agrees on. Counted in
  // chunk transfers on the critical path: the chain's last rank has the op after p - 2 + chunks
  // of them (the pipeline fills, then one per chunk); the binomial tree's root sends every chunk
  // ceil(log2 p) times. The chain wins from a few chunks up, the tree for a lone small chunk.
  static Shape shapeFor(uint64_t chunks, int nranks);

  // The shape around `rank`: its parent (-1 for the root) and its children, in sending order.
  static int parent(Shape shape, int rank, int root, int nranks);
  static std::vector<int> children(Shape shape, int rank, int root, int nranks);

  bool sendReady() const override { return have_ && next_ < children_.size(); }
  Transfer takeSend() override;
  bool recvReady() const override { return parent_ >= 0 && !recvPosted_; }
  Transfer takeRecv() override;
  void sendDone(int) override { ++sent_; }
  void recvDone(int) override { have_ = true; }
  bool finished() const override { return have_ && sent_ == children_.size(); }

 private:
  void* data_;  // the receive buffer: what arrives, and what goes on
  size_t bytes_;
  int parent_;
  std::vector<int> children_;
  size_t next_ = 0;  // children sent to (posted)
  size_t sent_ = 0;  // sends completed
  bool have_;        // the data is in data_
  bool recvPosted_ = false;
};

}  // namespace prioccl
