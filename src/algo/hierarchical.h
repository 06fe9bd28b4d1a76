// Two-level (hierarchical) all-reduce of one chunk as a step machine, for several ranks per host
// and one network link per host. A flat ring sends 2(p-1)/p of the data through every host's
// link; here each host's link carries 2(n-1)/n of it (n hosts):
//   1. gather: on a host with more ranks than the fewest any host has (S), each extra rank
//      hands its chunk to a partner among the host's first S ranks, which adds it in;
//   2. reduce-scatter over the host's first S ranks (a ring): local rank i then holds shard
//      (i+1) % S of the chunk, summed over its host;
//   3. across hosts: a ring all-reduce of that shard among the ranks with local index i, one
//      per host (S rings side by side, each over its own slice of the link);
//   4. all-gather of the shards over the host's first S ranks (a ring);
//   5. scatter: each partner sends the result back to its extra ranks.
// Phases run one after the other within a chunk (a phase's transfers all complete before the
// next one's are posted); chunks in flight overlap them, so the intra-host phases of one chunk
// run while another chunk's bytes cross the hosts' links. Every element is reduced once, in a
// fixed order (gather in local-index order, then the two rings' fixed orders) and then only
// copied, so every rank ends with the same bits. An average is divided once, at the last
// reduction, by the rank count.
//
// The host layout comes with the chunk (ChunkSpec::hosts); without one every rank is its own
// host and the algorithm is the ring. Step ids: [0, E) gather, then S-1 reduce-scatter,
// 2(n-1) across, S-1 all-gather, E scatter (E = most ranks on a host - S): 2(most + n - 2) in
// all, at most 2(p-1), the ring's count (the largest host and at least one rank on each other).
#pragma once

#include <vector>

#include "algo/chunk_algo.h"
#include "common/scratch_pool.h"

namespace prioccl {

class HierarchicalChunk final : public ChunkAlgo {
 public:
  // `pool` must outlive the chunk; its blocks hold a whole chunk (a gathered extra rank's data).
  HierarchicalChunk(const ChunkSpec& spec, ScratchPool& pool);
  ~HierarchicalChunk() override;

  static int steps(int nranks) { return 2 * (nranks - 1); }
  static size_t scratchBytes(size_t chunkBytes, int) { return chunkBytes + 16; }

  bool sendReady() const override;
  Transfer takeSend() override;
  bool recvReady() const override;
  Transfer takeRecv() override;
  void sendDone(int step) override;
  void recvDone(int step) override;
  bool finished() const override { return phase_ == Phase::kDone; }

 private:
  // Logical steps [lo, hi) of a ring all-reduce over `group` (global ranks in ring order) on a
  // region of the chunk: [0, n-1) reduce-scatter, [n-1, 2n-2) all-gather. The ring of
  // ring.cpp, over a subgroup and from any step id.
  struct RingPart {
    std::vector<int> group;
    int me = 0, n = 1, lo = 0, hi = 0, firstId = 0;
    const unsigned char* src = nullptr;  // this rank's contribution (== dst: in place)
    unsigned char* dst = nullptr;
    size_t count = 0;
    int divisor = 1;  // an average's, applied at the last reduce-scatter step
    int sendsPosted = 0, sendsDonePrefix = 0, recvsPosted = 0, recvsDone = 0;
    std::vector<char> sendDone;
    int steps() const { return hi - lo; }
    bool finished() const { return recvsDone == steps() && sendsDonePrefix == steps(); }
  };
  enum class Phase { kGather, kReduceScatter, kAcross, kAllGather, kScatter, kDone };

  void enter(Phase phase);  // sets the phase up, skipping any that has nothing to do
  void advanceIfDone();
  bool phaseDone() const;
  void setRing(std::vector<int> group, int me, int lo, int hi, int firstId,
               const unsigned char* src, unsigned char* dst, size_t count, int divisor);
  unsigned char* scratch();
  size_t segCount(const RingPart& r, int seg) const;
  size_t segOffset(const RingPart& r, int seg) const;
  int mod(int x, int n) const { return ((x % n) + n) % n; }

  ChunkSpec spec_;
  ScratchPool& pool_;
  ScratchPool::Block scratch_;
  size_t elem_, bytes_;
  int hosts_ = 1, host_ = 0, shards_ = 1, local_ = 0, extrasMax_ = 0;
  std::vector<int> hostRanks_;    // this host's ranks, ascending
  std::vector<int> acrossRanks_;  // the ranks of this local index, one per host (the across ring)
  std::vector<int>
      extras_;          // partner: the extra ranks it gathers (local indexes); extra: {partner}
  bool extra_ = false;  // this rank is one of its host's extra ranks
  const unsigned char* mine_;  // this rank's contribution so far (the send buffer until gathered)
  Phase phase_ = Phase::kGather;
  RingPart ring_;
  // The gather and scatter phases: transfers posted and completed.
  int posted_ = 0, sendsDone_ = 0, recvsDone_ = 0;
};

}  // namespace prioccl
