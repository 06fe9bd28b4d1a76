// Halving-doubling all-reduce of one chunk (Rabenseifner's algorithm): a reduce-scatter by
// recursive halving, then an all-gather by recursive doubling, log2(p) rounds each. Every rank
// sends 2(p-1)/p of the chunk, as the ring does, but in 2 log2(p) rounds instead of 2(p-1): the
// bandwidth-bound middle sizes (tens of KiB to a few MiB) where recursive doubling sends log2(p)
// times the chunk and the ring pays too many rounds. Ranks beyond the largest power of two hand
// their data to a neighbour first and get the result back last (RdSchedule).
//
// Each block of the chunk is reduced on exactly one rank and then copied unchanged to the others,
// so every rank ends with identical bits.
#pragma once

#include <cstdint>
#include <vector>

#include "algo/chunk_algo.h"
#include "algo/recursive_doubling.h"
#include "core/scratch_pool.h"

namespace prioccl {

class HalvingDoublingChunk final : public ChunkAlgo {
 public:
  // `pool` blocks hold at least scratchBytes(chunk bytes): the halves received while scattering,
  // and an in-place absorbing rank's whole incoming chunk.
  HalvingDoublingChunk(const ChunkSpec& spec, ScratchPool& pool);
  ~HalvingDoublingChunk() override;

  static int steps(int nranks) { return 2 * RdSchedule(0, nranks).rounds + 2; }
  static size_t scratchBytes(size_t chunkBytes, int /*nranks*/) { return chunkBytes + 16; }

  bool sendReady() const override;
  Transfer takeSend() override;
  bool recvReady() const override;
  Transfer takeRecv() override;
  void sendDone(int step) override;
  void recvDone(int step) override;
  bool finished() const override;

 private:
  enum class Phase : uint8_t {
    kHandOver,  // a rank beyond the power of two sends its chunk to its neighbour
    kAbsorb,    // ... which merges it into its own before the rounds
    kScatter,   // recursive halving: send one half of the range, reduce the other
    kGather,    // recursive doubling: swap the ranges reduced so far
    kReturn,    // the neighbour sends the result back
    kResult,    // ... to the rank that sat out
  };
  // One round: at most one send and one receive with one peer. Offsets and lengths in bytes.
  struct Round {
    Phase phase;
    int step, peer;
    bool send, recv;
    bool peerIsLower;  // the received value is the first operand of the reduction
    bool fromUser;     // this rank's values are still in the user's send buffer (not yet merged)
    size_t sendOff, sendBytes, recvOff, recvBytes;
  };
  void buildRounds();
  size_t blockOffset(int block) const;  // byte offset of block `block` of p2
  unsigned char* recvBuf() const { return static_cast<unsigned char*>(spec_.recv); }
  bool inPlace() const { return spec_.send == spec_.recv; }
  void tryAdvance();
  void finishRecv(const Round& r);

  ChunkSpec spec_;
  ScratchPool& pool_;
  RdSchedule sched_;
  size_t elem_;
  std::vector<Round> rounds_;
  std::vector<char> sendDone_;  // per round
  ScratchPool::Block scratch_;
  size_t cur_ = 0;            // round in progress
  bool sendTaken_ = false;    // ... its send is taken
  bool recvTaken_ = false;    // ... its receive is posted
  bool recvArrived_ = false;  // ... its receive completed
  int sendsOut_ = 0;
};

}  // namespace prioccl
