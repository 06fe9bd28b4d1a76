// Ring all-gather of one chunk as a step machine (ncclAllGather): the chunk is a slice of every
// rank's block; each rank's slice goes once around the ring, p - 1 steps, every link carrying
// (p - 1) / p of the chunk's data: bandwidth-optimal. Received slices land in place in the
// receive buffer, so every receive is posted at once; a send forwards the slice that arrived in
// the step before. No scratch, no arithmetic: the bytes arrive as they left.
#pragma once

#include <vector>

#include "algo/chunk_algo.h"

namespace prioccl {

class AllGatherChunk final : public ChunkAlgo {
 public:
  // spec.send: this rank's slice; spec.recv and spec.recvBlocks: the slices of every block (of
  // different lengths in an all-gather-v, some perhaps empty: sent and received all the same).
  explicit AllGatherChunk(const ChunkSpec& spec);

  static int steps(int nranks) { return nranks > 1 ? nranks - 1 : 1; }

  bool sendReady() const override {
    return sendsPosted_ < last_ && (sendsPosted_ == 0 || arrived_[sendsPosted_ - 1]);
  }
  Transfer takeSend() override;
  bool recvReady() const override { return recvsPosted_ < last_; }
  Transfer takeRecv() override;
  void sendDone(int) override { ++sendsDone_; }
  void recvDone(int step) override;
  bool finished() const override { return sendsDone_ == last_ && recvsDone_ == last_; }

 private:
  ChunkSpec::Slice block(int rank) const;  // this chunk's slice of `rank`'s block in recv
  int mod(int x) const { return ((x % p_) + p_) % p_; }

  ChunkSpec spec_;
  int p_, r_, last_;  // last_: p - 1 steps
  std::vector<bool> arrived_;
  int sendsPosted_ = 0, sendsDone_ = 0, recvsPosted_ = 0, recvsDone_ = 0;
};

}  // namespace prioccl
