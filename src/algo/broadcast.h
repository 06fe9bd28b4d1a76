// Broadcast of one chunk from a root as a step machine: every rank but the root receives the
// chunk from its parent in a RootTree (root_tree.h), then passes it on to its children.
// As NCCL's ncclBroadcast: only the root's send buffer is read, and the root's receive buffer gets
// the data too (copied when it is not the send buffer). No scratch, no reduction.
#pragma once

#include <cstddef>
#include <vector>

#include "algo/chunk_algo.h"
#include "algo/root_tree.h"

namespace prioccl {

class BroadcastChunk final : public ChunkAlgo {
 public:
  BroadcastChunk(const ChunkSpec& spec, int root, RootTree::Shape shape);

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
