// Two-level all-reduce step machine; the phases and why they give the same bits everywhere are in
// hierarchical.h.
#include "algo/hierarchical.h"

#include <cstring>

#include "algo/host_layout.h"
#include "algo/ring.h"
#include "reduce/reduce.h"

namespace prioccl {

HierarchicalChunk::HierarchicalChunk(const ChunkSpec& spec, ScratchPool& pool)
    : spec_(spec),
      pool_(pool),
      elem_(reduce::dtypeSize(spec.dtype)),
      bytes_(spec.count * reduce::dtypeSize(spec.dtype)),
      mine_(static_cast<const unsigned char*>(spec.send)) {
  const HostLayout* l = spec.hosts && spec.hosts->nranks() == spec.nranks ? spec.hosts : nullptr;
  if (l) {
    hosts_ = l->hosts();
    host_ = l->hostOf[spec.rank];
    local_ = l->localIndex[spec.rank];
    shards_ = l->fewestPerHost();
    extrasMax_ = l->mostPerHost() - shards_;
    hostRanks_ = l->members[host_];
    if (local_ < shards_)
      for (const std::vector<int>& m : l->members) acrossRanks_.push_back(m[local_]);
  } else {  // every rank its own host: the across phase alone, a ring over all ranks
    hosts_ = spec.nranks;
    host_ = spec.rank;
    hostRanks_ = {spec.rank};
    for (int r = 0; r < spec.nranks; ++r) acrossRanks_.push_back(r);
  }
  extra_ = local_ >= shards_;
  if (extra_) {
    extras_ = {(local_ - shards_) % shards_};  // its partner's local index
  } else {
    for (int e = shards_ + local_; e < static_cast<int>(hostRanks_.size()); e += shards_)
      extras_.push_back(e);
  }
  // One rank: the reduction of a single contribution is the contribution (Avg divides by 1).
  if (spec.nranks == 1 && spec.send != spec.recv) std::memcpy(spec_.recv, spec_.send, bytes_);
  enter(Phase::kGather);
}

HierarchicalChunk::~HierarchicalChunk() {
  pool_.give(std::move(scratch_));
}

unsigned char* HierarchicalChunk::scratch() {
  if (!scratch_) scratch_ = pool_.take();
  return scratch_.get();
}

size_t HierarchicalChunk::segCount(const RingPart& r, int seg) const {
  return ringSegment(r.count, r.n, seg).count;
}

size_t HierarchicalChunk::segOffset(const RingPart& r, int seg) const {
  return ringSegment(r.count, r.n, seg).first * elem_;
}

void HierarchicalChunk::setRing(std::vector<int> group, int me, int lo, int hi, int firstId,
                                const unsigned char* src, unsigned char* dst, size_t count,
                                int divisor) {
  ring_ = RingPart{};
  ring_.group = std::move(group);
  ring_.n = static_cast<int>(ring_.group.size());
  ring_.me = me;
  ring_.lo = lo;
  ring_.hi = hi;
  ring_.firstId = firstId;
  ring_.src = src;
  ring_.dst = dst;
  ring_.count = count;
  ring_.divisor = divisor;
  ring_.sendDone.assign(static_cast<size_t>(hi - lo), 0);
}

void HierarchicalChunk::enter(Phase phase) {
  const int S = shards_, H = hosts_, E = extrasMax_;
  const int avg = spec_.op == priocclAvg ? spec_.nranks : 1;
  auto* recv = static_cast<unsigned char*>(spec_.recv);
  for (phase_ = phase; phase_ != Phase::kDone; phase_ = static_cast<Phase>(int(phase_) + 1)) {
    posted_ = sendsDone_ = recvsDone_ = 0;
    ring_ = RingPart{};
    switch (phase_) {
      case Phase::kGather:
      case Phase::kScatter:
        if (!extras_.empty()) return;
        break;
      case Phase::kReduceScatter:
        if (extra_ || S == 1) break;
        // With one host this is the last reduction: the average divides here.
        setRing({hostRanks_.begin(), hostRanks_.begin() + S}, local_, 0, S - 1, E, mine_, recv,
                spec_.count, H == 1 ? avg : 1);
        return;
      case Phase::kAcross: {
        if (extra_ || H == 1) break;
        // This rank's shard: after the reduce-scatter, segment (local + 1) % S of the chunk's
        // split into S (ring.cpp's rule); with S == 1 the whole chunk, still where mine_ is.
        RingSegment shard = ringSegment(spec_.count, S, (local_ + 1) % S);
        size_t off = shard.first * elem_, count = shard.count;
        setRing(acrossRanks_, host_, 0, 2 * (H - 1), E + S - 1, (S > 1 ? recv : mine_) + off,
                recv + off, count, avg);
        return;
      }
      case Phase::kAllGather:
        if (extra_ || S == 1) break;
        pool_.give(std::move(scratch_));  // nothing is reduced from here on
        setRing({hostRanks_.begin(), hostRanks_.begin() + S}, local_, S - 1, 2 * (S - 1),
                E + (S - 1) + 2 * (H - 1), recv, recv, spec_.count, 1);
        return;
      case Phase::kDone:
        return;
    }
  }
}

bool HierarchicalChunk::phaseDone() const {
  switch (phase_) {
    case Phase::kGather:
      return extra_ ? sendsDone_ == 1 : recvsDone_ == static_cast<int>(extras_.size());
    case Phase::kScatter:
      return extra_ ? recvsDone_ == 1 : sendsDone_ == static_cast<int>(extras_.size());
    case Phase::kDone:
      return true;
    default:
      return ring_.finished();
  }
}

void HierarchicalChunk::advanceIfDone() {
  if (phase_ != Phase::kDone && phaseDone()) enter(static_cast<Phase>(int(phase_) + 1));
}

bool HierarchicalChunk::sendReady() const {
  switch (phase_) {
    case Phase::kGather:
      return extra_ && posted_ == 0;
    case Phase::kScatter:
      return !extra_ && posted_ < static_cast<int>(extras_.size());
    case Phase::kDone:
      return false;
    default:  // a send forwards what the previous receive brought
      return ring_.sendsPosted < ring_.steps() && ring_.sendsPosted <= ring_.recvsDone;
  }
}

Transfer HierarchicalChunk::takeSend() {
  const int S = shards_, H = hosts_, E = extrasMax_;
  Transfer t;
  if (phase_ == Phase::kGather) {  // an extra rank hands its contribution to its partner
    ++posted_;
    t.peer = hostRanks_[extras_[0]];
    t.step = local_ - S;
    t.buf = const_cast<void*>(spec_.send);
    t.bytes = bytes_;
    return t;
  }
  if (phase_ == Phase::kScatter) {  // a partner sends the result back
    int e = extras_[posted_++];
    t.peer = hostRanks_[e];
    t.step = E + 2 * (S - 1) + 2 * (H - 1) + (e - S);
    t.buf = spec_.recv;
    t.bytes = bytes_;
    return t;
  }
  RingPart& r = ring_;
  int k = r.sendsPosted++, s = r.lo + k;
  t.peer = r.group[mod(r.me + 1, r.n)];
  t.step = r.firstId + k;
  int seg = s < r.n - 1 ? mod(r.me - s, r.n)                     // reduce-scatter: our partial
                        : mod(r.me + 1 - (s - (r.n - 1)), r.n);  // all-gather: what came last
  const unsigned char* from = s == 0 ? r.src : r.dst;
  t.buf = const_cast<unsigned char*>(from + segOffset(r, seg));
  t.bytes = segCount(r, seg) * elem_;
  return t;
}

bool HierarchicalChunk::recvReady() const {
  switch (phase_) {
    case Phase::kGather:  // one at a time: the scratch block holds one contribution
      return !extra_ && posted_ < static_cast<int>(extras_.size()) && posted_ == recvsDone_;
    case Phase::kScatter:
      return extra_ && posted_ == 0;
    case Phase::kDone:
      return false;
    default: {
      const RingPart& r = ring_;
      if (r.recvsPosted >= r.steps() || r.recvsPosted > r.recvsDone) return false;
      // An all-gather receive overwrites the segment that reduce-scatter step s - (n-1) sent
      // (in this ring, or in an earlier phase for an all-gather-only ring): that send must be done.
      int s = r.lo + r.recvsPosted;
      return s < r.n - 1 || r.lo + r.sendsDonePrefix > s - (r.n - 1);
    }
  }
}

Transfer HierarchicalChunk::takeRecv() {
  const int S = shards_, H = hosts_, E = extrasMax_;
  Transfer x;
  if (phase_ == Phase::kGather) {
    int e = extras_[posted_++];
    x.peer = hostRanks_[e];
    x.step = e - S;
    x.buf = scratch();
    x.bytes = bytes_;
    return x;
  }
  if (phase_ == Phase::kScatter) {
    ++posted_;
    x.peer = hostRanks_[extras_[0]];
    x.step = E + 2 * (S - 1) + 2 * (H - 1) + (local_ - S);
    x.buf = spec_.recv;
    x.bytes = bytes_;
    return x;
  }
  RingPart& r = ring_;
  int k = r.recvsPosted++, s = r.lo + k;
  x.peer = r.group[mod(r.me - 1, r.n)];
  x.step = r.firstId + k;
  if (s < r.n - 1) {
    int seg = mod(r.me - s - 1, r.n);
    x.bytes = segCount(r, seg) * elem_;
    // In place the destination still holds our own partial: receive beside it.
    x.buf = r.src == r.dst ? scratch() : r.dst + segOffset(r, seg);
  } else {
    int seg = mod(r.me - (s - (r.n - 1)), r.n);
    x.buf = r.dst + segOffset(r, seg);
    x.bytes = segCount(r, seg) * elem_;
  }
  return x;
}

void HierarchicalChunk::sendDone(int step) {
  if (phase_ == Phase::kGather || phase_ == Phase::kScatter) {
    ++sendsDone_;
  } else {
    RingPart& r = ring_;
    r.sendDone[step - r.firstId] = 1;
    while (r.sendsDonePrefix < r.steps() && r.sendDone[r.sendsDonePrefix]) ++r.sendsDonePrefix;
  }
  advanceIfDone();
}

void HierarchicalChunk::recvDone(int step) {
  auto* recv = static_cast<unsigned char*>(spec_.recv);
  if (phase_ == Phase::kGather) {  // add the extra rank's contribution in, in local-index order
    reduce::apply(recv, scratch_.get(), mine_, spec_.count, spec_.dtype, spec_.op, 1);
    mine_ = recv;
    ++recvsDone_;
  } else if (phase_ == Phase::kScatter) {
    ++recvsDone_;
  } else {
    RingPart& r = ring_;
    ++r.recvsDone;
    int s = r.lo + (step - r.firstId);
    if (s < r.n - 1) {  // all-gather data landed in place; reduce-scatter data is reduced
      int seg = mod(r.me - s - 1, r.n);
      size_t off = segOffset(r, seg);
      bool inPlace = r.src == r.dst;
      const void* incoming = inPlace ? static_cast<const void*>(scratch_.get()) : r.dst + off;
      const void* local = inPlace ? static_cast<const void*>(r.dst + off) : r.src + off;
      reduce::apply(r.dst + off, incoming, local, segCount(r, seg), spec_.dtype, spec_.op,
                    s == r.n - 2 ? r.divisor : 1);
    }
  }
  advanceIfDone();
}

}  // namespace prioccl
