// Ring all-reduce of one chunk as a step machine: p-1 reduce-scatter steps, then p-1 all-gather
// steps. Bandwidth-optimal (each rank sends 2(p-1)/p of the chunk); many chunks in flight at once
// pipeline the ring, so the link never waits on one chunk's reduction.
#pragma once

#include <vector>

#include "algo/chunk_algo.h"
#include "common/scratch_pool.h"

namespace prioccl {

// The ring's split of `count` elements into `n` segments: segment `seg` starts at element
// `first`; the first count % n segments hold one element more. Shared with the hierarchical
// all-reduce, whose rings split alike.
struct RingSegment {
  size_t first, count;
};
inline RingSegment ringSegment(size_t count, int n, int seg) {
  size_t base = count / n, extra = count % n, s = static_cast<size_t>(seg);
  return {s * base + (s < extra ? s : extra), base + (s < extra ? 1 : 0)};
}

class RingChunk final : public ChunkAlgo {
 public:
  // `pool` must outlive the chunk; it supplies the receive scratch of in-place reduce-scatter.
  RingChunk(const ChunkSpec& spec, ScratchPool& pool);
  ~RingChunk() override;

  static int steps(int nranks) { return 2 * (nranks - 1); }
  // Scratch bytes one chunk of `chunkBytes` needs on `nranks` ranks (the largest segment).
  static size_t scratchBytes(size_t chunkBytes, int nranks) { return chunkBytes / nranks + 16; }

  bool sendReady() const override;
  Transfer takeSend() override;
  bool recvReady() const override;
  Transfer takeRecv() override;
  void sendDone(int step) override;
  void recvDone(int step) override;
  bool finished() const override;

 private:
  int mod(int x) const { return ((x % p_) + p_) % p_; }
  size_t segOffset(int seg) const;
  unsigned char* recvSeg(int seg) const;
  const unsigned char* sendSeg(int seg) const;
  size_t segCount(int seg) const;
  bool inPlace() const { return spec_.send == spec_.recv; }

  ChunkSpec spec_;
  ScratchPool& pool_;
  ScratchPool::Block scratch_;
  int p_, r_, nsteps_;
  size_t elem_;
  int sendsPosted_ = 0;
  int sendsDonePrefix_ = 0;  // steps 0..prefix-1 have all completed
  std::vector<char> sendDone_;
  int recvsPosted_ = 0;
  int recvsDone_ = 0;
};

}  // namespace prioccl
