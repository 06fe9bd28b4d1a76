// A chunk of a point-to-point send or receive: one transfer to or from one peer. Through the
// same scheduler as the collectives' chunks, so an urgent send (a pipeline stage's activations)
// preempts less urgent all-reduce traffic at the next step boundary, and vice versa.
#pragma once

#include "algo/chunk_algo.h"

namespace prioccl {

class PointToPointChunk final : public ChunkAlgo {
 public:
  PointToPointChunk(const ChunkSpec& spec, int peer, bool isSend);
  bool sendReady() const override { return isSend_ && !posted_; }
  Transfer takeSend() override;
  bool recvReady() const override { return !isSend_ && !posted_; }
  Transfer takeRecv() override;
  void sendDone(int) override { done_ = true; }
  void recvDone(int) override { done_ = true; }
  bool finished() const override { return done_; }

 private:
  Transfer transfer_;
  bool isSend_, posted_ = false, done_ = false;
};

}  // namespace prioccl
