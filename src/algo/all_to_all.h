// All-to-all of one chunk as a step machine (MPI_Alltoall with equal counts): the chunk is a
// slice of every block of both buffers; in step s = 1 .. p - 1 rank r sends its block for rank
// r + s straight to it and receives rank r - s's block for r. Each block crosses one link once, so
// there is nothing to pipeline or forward: every send and receive is posted at once, and the
// scheduler orders them with the other ops' by priority. No scratch.
#pragma once

#include "algo/chunk_algo.h"

namespace prioccl {

class AllToAllChunk final : public ChunkAlgo {
 public:
  // spec.send, spec.recv, spec.sendBlocks and spec.recvBlocks: this chunk's slices of every block
  // of both (of different lengths in an all-to-all-v, some perhaps empty).
  explicit AllToAllChunk(const ChunkSpec& spec);

  static int steps(int nranks) { return nranks > 1 ? nranks - 1 : 1; }

  bool sendReady() const override { return sendsPosted_ < last_; }
  Transfer takeSend() override;
  bool recvReady() const override { return recvsPosted_ < last_; }
  Transfer takeRecv() override;
  void sendDone(int) override { ++sendsDone_; }
  void recvDone(int) override { ++recvsDone_; }
  bool finished() const override { return sendsDone_ == last_ && recvsDone_ == last_; }

 private:
  int mod(int x) const { return ((x % p_) + p_) % p_; }
  ChunkSpec::Slice sendSlice(int peer) const;  // this chunk's slice of the block for `peer`
  ChunkSpec::Slice recvSlice(int peer) const;  // ... and of the block from it

  ChunkSpec spec_;
  int p_, r_, last_;  // last_: p - 1 steps
  int sendsPosted_ = 0, sendsDone_ = 0, recvsPosted_ = 0, recvsDone_ = 0;
};

}  // namespace prioccl
