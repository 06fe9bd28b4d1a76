// Recursive doubling all-reduce of one chunk: ceil(log2 p) exchange rounds of the whole chunk
// (plus one step before and one after for ranks beyond the largest power of two). Latency-optimal
// for small chunks; each rank sends log2(p) times the chunk, so large ones belong to ring or tree.
//
// Every merge takes the lower-ranked group's value as the first operand, and every rank merges the
// same groups in the same rounds, so all ranks compute the very same expression: bitwise-identical
// results without a broadcast, NaNs and min/max ties included.
//
// An optional Envelope rides in front of every message and is merged pairwise like the data; the
// engine uses it to agree on an op's arguments in the same rounds that reduce its data.
#pragma once

#include <vector>

#include "algo/chunk_algo.h"
#include "common/scratch_pool.h"

namespace prioccl {

// The exchange pattern of rank `rank` among `nranks`. With p2 the largest power of two <= p and
// extra = p - p2, ranks below 2 * extra pair up: the even one hands its data to the odd one
// (step 0), sits out the rounds and gets the result back (last step). Everyone else takes part
// in the log2(p2) rounds (steps 1..) under a virtual rank.
struct RdSchedule {
  RdSchedule(int rank, int nranks);
  static int steps(int nranks);  // distinct step ids: rounds + 2
  int rank, nranks, rounds, extra;
  bool sitsOut;  // even rank below 2 * extra
  bool absorbs;  // odd rank below 2 * extra: merges its even neighbour's data first
  int vrank;     // virtual rank in the rounds (-1 when sitting out)
  int realRank(int v) const { return v < extra ? 2 * v + 1 : v + extra; }
  int partner(int round) const { return realRank(vrank ^ (1 << round)); }
  int lastStep() const { return rounds + 1; }
};

// Header carried in front of every message of a chunk, merged like the payload.
class Envelope {
 public:
  virtual ~Envelope() = default;
  virtual size_t headerBytes() const = 0;
  // Longest payload a peer may send, so a peer that disagrees still fits in the receive.
  virtual size_t maxPayloadBytes() const = 0;
  // This rank's header, and the payload bytes it sends (0: header only).
  virtual void writeOwn(void* header) const = 0;
  virtual size_t ownPayloadBytes() const = 0;
  // dst = merge(lower, upper) (dst may alias either); the payload bytes that came with each.
  // Returns whether the two payloads agree in length and meaning and may be reduced.
  virtual bool merge(void* dst, const void* lower, size_t lowerPayload, const void* upper,
                     size_t upperPayload) = 0;
  // Whether a final merged header lets the payload reach the receive buffer (a rank that sat
  // out adopts its partner's result without merging, so this is checked once more at the end).
  virtual bool accepts(const void* header) const = 0;
};

class RecursiveDoublingChunk final : public ChunkAlgo {
 public:
  // `pool` blocks must hold the envelope's header plus the chunk (or its maxPayloadBytes); with an
  // envelope, the payload is reduced only while merged headers agree (see Envelope::merge).
  RecursiveDoublingChunk(const ChunkSpec& spec, ScratchPool& pool, Envelope* envelope = nullptr);
  ~RecursiveDoublingChunk() override;

  static int steps(int nranks) { return RdSchedule::steps(nranks); }
  static size_t scratchBytes(size_t chunkBytes, int /*nranks*/) { return chunkBytes + 64; }

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
  // Whether the payload was reduced all the way (always true without an envelope).
  bool payloadValid() const { return payloadValid_; }

 private:
  struct Exchange {
    int step, peer;
    bool send, recv;
    bool peerIsLower;            // which operand the received value is in the merge
    ScratchPool::Block inbox{};  // its receive block, once the receive is taken
    long long received = -1;     // bytes that arrived, -1 until then
  };
  void buildExchanges();
  size_t recvIndex(int step) const;  // the exchange receiving at `step` (size() if none)
  size_t messageBytes() const { return header_ + payload_; }
  void tryAdvance();
  void merge(size_t i);
  void complete();

  ChunkSpec spec_;
  ScratchPool& pool_;
  Envelope* envelope_;
  RdSchedule sched_;
  size_t elem_, header_, payload_;
  // One allocation per chunk for the exchanges and one for retired_: small ops create a chunk
  // per op, and its allocations are a visible part of their latency (issue 19).
  std::vector<Exchange> xs_;
  ScratchPool::Block acc_;                   // [header | running result]
  std::vector<ScratchPool::Block> retired_;  // earlier accumulators (their sends may be in flight)
  size_t cur_ = 0;                           // exchange in progress
  size_t recvsPosted_ = 0;                   // exchanges whose receive is posted
  int sendsOut_ = 0;
  bool sendTaken_ = false;  // the current exchange's send has been taken
  bool payloadValid_ = true;
  bool done_ = false;
};

}  // namespace prioccl
