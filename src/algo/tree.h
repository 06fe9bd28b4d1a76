// Double binary tree all-reduce of one chunk as a step machine (as NCCL's trees): the chunk's
// first half is reduced up and broadcast down tree 0, its second half tree 1. Every rank is
// interior in at most one of the two trees, so each rank sends and receives about one chunk in
// each phase and both directions of every link carry data. Latency grows with log2(p) instead of
// the ring's p; many chunks in flight pipeline the trees.
#pragma once

#include "algo/chunk_algo.h"
#include "common/scratch_pool.h"

namespace prioccl {

// One rank's place in one binary tree; -1 where absent. A node with one child has it in
// child[0]. `slot` is which of its parent's children this rank is (0 or 1; -1 at the root).
struct TreeLinks {
  int parent = -1;
  int child[2] = {-1, -1};
  int slot = -1;
};

// The links of `rank` in tree `tree` (0 or 1) of the double binary tree over `nranks` ranks.
// Tree 0 is an in-order binary tree over the ranks with the odd ranks interior; tree 1 is the
// same shape with every rank shifted up by one (mod nranks), so its interior ranks are even.
TreeLinks treeLinks(int nranks, int rank, int tree);

class TreeChunk final : public ChunkAlgo {
 public:
  // `pool` must outlive the chunk; it supplies one block per child partial sum being received.
  TreeChunk(const ChunkSpec& spec, ScratchPool& pool);
  ~TreeChunk() override;

  // Per tree t: step 3t is a partial sum from child slot 0 up to its parent, 3t+1 from child
  // slot 1, 3t+2 the final value down from a parent to its children.
  static int steps(int nranks) { return nranks > 1 ? 6 : 0; }
  // Bytes of one scratch block for a chunk of `chunkBytes`: one half of it (the larger one).
  static size_t scratchBytes(size_t chunkBytes, int nranks) {
    return nranks > 1 ? chunkBytes / 2 + 16 : 0;
  }

  bool sendReady() const override { return sendsTaken_ < sendsQueued_; }
  Transfer takeSend() override { return sendQ_[sendsTaken_++]; }
  bool recvReady() const override { return recvsTaken_ < recvsQueued_; }
  Transfer takeRecv() override { return recvQ_[recvsTaken_++]; }
  void sendDone(int step) override;
  void recvDone(int step) override;
  bool finished() const override { return sendsDone_ == sendsTotal_ && recvsDone_ == recvsTotal_; }

 private:
  static constexpr int kMaxQueued = 6;  // per tree: 1 up + 2 down sends; 2 up + 1 down receives

  // The part of the chunk one tree carries.
  struct Half {
    TreeLinks links;
    int children = 0;
    size_t offset = 0;         // bytes into the chunk
    size_t count = 0;          // elements; 0 = this tree carries nothing
    ScratchPool::Block in[2];  // partial sums received from the children
    bool arrived[2] = {false, false};
    int reduced = 0;  // children folded into the accumulator so far, in slot order
    bool downRecvQueued = false;
  };

  unsigned char* recvHalf(const Half& h) const {
    return static_cast<unsigned char*>(spec_.recv) + h.offset;
  }
  const unsigned char* sendHalf(const Half& h) const {
    return static_cast<const unsigned char*>(spec_.send) + h.offset;
  }
  bool inPlace() const { return spec_.send == spec_.recv; }
  void queueSend(int peer, int step, const void* buf, size_t bytes);
  void queueRecv(int peer, int step, void* buf, size_t bytes);
  void reduceArrived(int t);
  void sendDown(int t);

  ChunkSpec spec_;
  ScratchPool& pool_;
  int p_;
  size_t elem_;
  Half half_[2];
  Transfer sendQ_[kMaxQueued];
  Transfer recvQ_[kMaxQueued];
  int sendsQueued_ = 0, sendsTaken_ = 0, sendsDone_ = 0, sendsTotal_ = 0;
  int recvsQueued_ = 0, recvsTaken_ = 0, recvsDone_ = 0, recvsTotal_ = 0;
};

}  // namespace prioccl
