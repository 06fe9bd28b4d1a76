// Ring reduce-scatter of one chunk as a step machine (ncclReduceScatter): the chunk is a slice of
// every rank's block of the send buffer; block b's partial sum starts at rank b + 1 and goes
// around the ring, each rank adding its own contribution, p - 1 steps, until it reaches rank b,
// which ends with the reduction of block b (in the fixed ring order starting at b + 1, so the
// same bits every run). Every link carries (p - 1) / p of the chunk: bandwidth-optimal.
//
// Partial sums live in two scratch blocks used in turn (the send buffer is the user's, the
// receive buffer holds only this rank's block): the receive of step t reuses the block the send
// of step t - 1 read, so it waits for that send.
#pragma once

#include <vector>

#include "algo/chunk_algo.h"
#include "common/scratch_pool.h"

namespace prioccl {

class ReduceScatterChunk final : public ChunkAlgo {
 public:
  // spec.send and spec.sendBlocks: this chunk's slices of every block (of different lengths in a
  // reduce-scatter-v, some perhaps empty); spec.recv: this rank's result slice. `pool` blocks hold
  // at least spec.count elements.
  ReduceScatterChunk(const ChunkSpec& spec, ScratchPool& pool);
  ~ReduceScatterChunk() override;

  static int steps(int nranks) { return nranks > 1 ? nranks - 1 : 1; }

  bool sendReady() const override {
    return sendsPosted_ < last_ && (sendsPosted_ == 0 || reduced_[sendsPosted_ - 1]);
  }
  Transfer takeSend() override;
  bool recvReady() const override;
  Transfer takeRecv() override;
  void sendDone(int step) override;
  void recvDone(int step) override;
  bool finished() const override { return sendsDone_ == last_ && recvsDone_ == last_; }

 private:
  ChunkSpec::Slice contribution(int block) const;  // this rank's slice of `block`
  int mod(int x) const { return ((x % p_) + p_) % p_; }

  ChunkSpec spec_;
  ScratchPool& pool_;
  int p_, r_, last_;  // last_: p - 1 steps
  size_t elem_;
  ScratchPool::Block partial_[2];
  std::vector<bool> reduced_, sent_;
  int sendsPosted_ = 0, sendsDone_ = 0, recvsPosted_ = 0, recvsDone_ = 0;
};

}  // namespace prioccl
