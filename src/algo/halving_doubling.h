// Halving-doubling all-reduce of one chunk (Rabenseifner's algorithm): a reduce-scatter by
// recursive halving, then an all-gather by recursive doubling, log2(p) rounds each. Every rank
// sends 2(p-1)/p of the chunk, as the ring does, but in 2 log2(p) rounds instead of 2(p-1): the
// bandwidth-bound middle sizes (tens of KiB to a few MiB) where recursive doubling sends log2(p)
// times the chunk and the ring pays too many rounds. Ranks beyond the largest power of two hand
// their data to a neighbour first and get the result back last (RdSchedule).
//
// Each block of the chunk is reduced on exactly one rank and then copied unchanged to the others,
// so every rank ends with identical bits.
//
// The scattering rounds pair the ranks exactly as recursive doubling's rounds do (distance 1, 2,
// 4, ...; the same step numbers, the hand-over before and the return after them), so with an
// Envelope the engine's agreement can ride on them: headers travel with the halves and are
// merged as recursive doubling merges them, every rank knows the verdict once scattering is
// over, and the gathering rounds run only if all agree. A rank that agrees with nobody runs
// recursive doubling's pattern on the same steps and finds the disagreement in the same rounds.
// With an envelope the receive buffer is written only after that verdict.
#pragma once

#include <vector>

#include "algo/chunk_algo.h"
#include "algo/recursive_doubling.h"
#include "common/scratch_pool.h"

namespace prioccl {

class HalvingDoublingChunk final : public ChunkAlgo {
 public:
  // `pool` blocks hold at least scratchBytes(chunk bytes), and with an envelope its header plus
  // its maxPayloadBytes (at least the chunk).
  HalvingDoublingChunk(const ChunkSpec& spec, ScratchPool& pool, Envelope* envelope = nullptr);
  ~HalvingDoublingChunk() override;

  static int steps(int nranks) { return 2 * RdSchedule(0, nranks).rounds + 2; }
  static size_t scratchBytes(size_t chunkBytes, int /*nranks*/) { return chunkBytes + 16; }

  bool sendReady() const override;
  Transfer takeSend() override;
  bool recvReady() const override;
  Transfer takeRecv() override;
  void sendDone(int step) override;
  void recvDone(int step) override;
  void recvLength(int step, size_t bytes) override;
  bool finished() const override;

  // The merged header once finished() (null without an envelope).
  const void* header() const { return envelope_ ? acc_.get() : nullptr; }
  // Whether the result reached the receive buffer (always true without an envelope).
  bool payloadValid() const { return payloadValid_; }

 private:
  enum class Phase : unsigned char {
    kHandOver,  // a rank beyond the power of two sends its chunk to its neighbour
    kAbsorb,    // ... which merges it into its own before the rounds
    kScatter,   // recursive halving: send one half of the range, reduce the other
    kGather,    // recursive doubling: swap the ranges reduced so far
    kReturn,    // the neighbour sends the result back
    kResult,    // ... to the rank that sat out
  };
  // One round: at most one send and one receive with one peer. Offsets and lengths in bytes of
  // the chunk's data (an envelope's header comes on top).
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
  const unsigned char* sendBuf() const { return static_cast<const unsigned char*>(spec_.send); }
  bool inPlace() const { return spec_.send == spec_.recv; }
  Transfer envelopeSend(const Round& r);
  void finishRecv(const Round& r);
  void mergeEnvelope(const Round& r);
  void tryAdvance();

  ChunkSpec spec_;
  ScratchPool& pool_;
  Envelope* envelope_;
  RdSchedule sched_;
  size_t elem_, bytes_, header_;
  std::vector<Round> rounds_;
  std::vector<char> sendDone_;  // per round
  ScratchPool::Block scratch_;  // without an envelope: received halves (or an absorbed chunk)
  // With an envelope: [merged header | running values of the whole chunk], and the blocks of
  // messages (sent ones stay until the chunk ends, as their sends may be in flight).
  ScratchPool::Block acc_, inbox_;
  std::vector<ScratchPool::Block> retired_;
  size_t received_ = 0;    // bytes that arrived for the current round's receive
  bool gathering_ = true;  // with an envelope: every rank agrees, so the ranges are gathered
  bool payloadValid_ = true;
  size_t cur_ = 0;            // round in progress
  bool sendTaken_ = false;    // ... its send is taken
  bool recvTaken_ = false;    // ... its receive is posted
  bool recvArrived_ = false;  // ... its receive completed
  int sendsOut_ = 0;
};

}  // namespace prioccl
