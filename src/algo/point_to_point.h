// A chunk of a point-to-point send or receive: one transfer to or from one peer. Through the
// same scheduler as the collectives' chunks, so an urgent send (a pipeline stage's activations)
// preempts less urgent all-reduce traffic at the next step boundary, and vice versa.
//
// The first chunk of an op may also carry the op's total length (a second, 8-byte transfer): a
// send shorter or longer than the receive by whole chunks matches every chunk the two have in
// common exactly, and without the total the receive would wait for chunks that never come (or the
// send for receives never posted) until the timeout. The receiver compares the totals as soon as
// the first chunk's header lands and fails the communicator, which tells the sender.
#pragma once

#include <cstdint>

#include "algo/chunk_algo.h"

namespace prioccl {

class PointToPointChunk final : public ChunkAlgo {
 public:
  // `totalBytes` > 0: this chunk also sends (or receives and checks) the op's total length.
  PointToPointChunk(const ChunkSpec& spec, int peer, bool isSend, uint64_t totalBytes = 0);
  bool sendReady() const override { return isSend_ && posted_ < transfers_; }
  Transfer takeSend() override { return take(); }
  bool recvReady() const override { return !isSend_ && posted_ < transfers_; }
  Transfer takeRecv() override { return take(); }
  void sendDone(int) override { ++done_; }
  void recvDone(int step) override;  // throws priocclRemoteError when the totals differ
  bool finished() const override { return done_ == transfers_; }

  static constexpr int kDataStep = 0, kHeaderStep = 1;

 private:
  Transfer take();

  Transfer data_;
  int peer_, rank_, transfers_, posted_ = 0, done_ = 0;
  bool isSend_;
  uint64_t total_, header_ = 0;  // header_: this op's total (send) or the peer's (receive)
};

}  // namespace prioccl
