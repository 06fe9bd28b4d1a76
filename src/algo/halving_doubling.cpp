// Halving-doubling step machine; see halving_doubling.h.
#include "algo/halving_doubling.h"

#include <algorithm>
#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {

HalvingDoublingChunk::HalvingDoublingChunk(const ChunkSpec& spec, ScratchPool& pool)
    : spec_(spec),
      pool_(pool),
      sched_(spec.rank, spec.nranks),
      elem_(reduce::dtypeSize(spec.dtype)) {
  buildRounds();
  sendDone_.assign(rounds_.size(), 0);
  // One rank: the reduction of a single contribution is the contribution (Avg divides by 1).
  if (rounds_.empty() && !inPlace()) std::memcpy(spec_.recv, spec_.send, spec_.count * elem_);
}

HalvingDoublingChunk::~HalvingDoublingChunk() {
  pool_.give(std::move(scratch_));
}

// The chunk is cut into p2 blocks (p2: the largest power of two <= p); the first count % p2
// blocks hold one extra element.
size_t HalvingDoublingChunk::blockOffset(int block) const {
  size_t p2 = size_t{1} << sched_.rounds, b = static_cast<size_t>(block);
  size_t base = spec_.count / p2, extra = spec_.count % p2;
  return (b * base + std::min(b, extra)) * elem_;
}

void HalvingDoublingChunk::buildRounds() {
  const RdSchedule& s = sched_;
  size_t all = spec_.count * elem_;
  int last = 2 * s.rounds + 1;
  if (s.sitsOut) {
    rounds_.push_back({Phase::kHandOver, 0, s.rank + 1, true, false, false, true, 0, all, 0, 0});
    rounds_.push_back({Phase::kResult, last, s.rank + 1, false, true, false, false, 0, 0, 0, all});
    return;
  }
  if (s.absorbs)
    rounds_.push_back({Phase::kAbsorb, 0, s.rank - 1, false, true, true, true, 0, 0, 0, all});
  // Scattering: the range of blocks this rank is responsible for halves every round; it sends the
  // half its partner keeps and reduces the half it keeps. It ends with block vrank.
  int lo = 0, hi = 1 << s.rounds;
  auto span = [&](int from, int to) { return blockOffset(to) - blockOffset(from); };
  for (int i = 0; i < s.rounds; ++i) {
    int half = (hi - lo) / 2, peerV = s.vrank ^ half;
    bool upper = (s.vrank & half) != 0;
    int keepLo = upper ? lo + half : lo, giveLo = upper ? lo : lo + half;
    rounds_.push_back({Phase::kScatter, 1 + i, s.realRank(peerV), true, true, peerV < s.vrank,
                       i == 0 && !s.absorbs, blockOffset(giveLo), span(giveLo, giveLo + half),
                       blockOffset(keepLo), span(keepLo, keepLo + half)});
    lo = keepLo;
    hi = keepLo + half;
  }
  // Gathering: partners swap their reduced ranges, which double every round.
  for (int j = 0; j < s.rounds; ++j) {
    int size = hi - lo, peerV = s.vrank ^ size, peerLo = lo ^ size;
    rounds_.push_back({Phase::kGather, 1 + s.rounds + j, s.realRank(peerV), true, true,
                       peerV < s.vrank, false, blockOffset(lo), span(lo, hi), blockOffset(peerLo),
                       span(peerLo, peerLo + size)});
    lo = std::min(lo, peerLo);
    hi = lo + 2 * size;
  }
  if (s.absorbs)
    rounds_.push_back({Phase::kReturn, last, s.rank - 1, true, false, false, false, 0, all, 0, 0});
}

bool HalvingDoublingChunk::sendReady() const {
  return cur_ < rounds_.size() && rounds_[cur_].send && !sendTaken_;
}

Transfer HalvingDoublingChunk::takeSend() {
  const Round& r = rounds_[cur_];
  sendTaken_ = true;
  ++sendsOut_;
  const void* base = r.fromUser ? spec_.send : spec_.recv;
  Transfer t{r.peer, r.step,
             const_cast<unsigned char*>(static_cast<const unsigned char*>(base)) + r.sendOff,
             r.sendBytes};
  tryAdvance();
  return t;
}

// One receive at a time, posted when its round begins. Scattering receives land in the scratch;
// gathering ones (and the final result) land in the receive buffer, where an earlier send of
// this chunk may still be reading: they wait for every earlier round's send (normally long done).
bool HalvingDoublingChunk::recvReady() const {
  if (cur_ >= rounds_.size() || !rounds_[cur_].recv || recvTaken_) return false;
  Phase ph = rounds_[cur_].phase;
  if (ph == Phase::kScatter || ph == Phase::kAbsorb) return true;
  for (size_t i = 0; i < cur_; ++i)
    if (rounds_[i].send && !sendDone_[i]) return false;
  return true;
}

Transfer HalvingDoublingChunk::takeRecv() {
  const Round& r = rounds_[cur_];
  recvTaken_ = true;
  unsigned char* buf = recvBuf() + r.recvOff;
  if (r.phase == Phase::kScatter || (r.phase == Phase::kAbsorb && inPlace())) {
    if (!scratch_) scratch_ = pool_.take();
    buf = scratch_.get();
  }
  return Transfer{r.peer, r.step, buf, r.recvBytes};
}

void HalvingDoublingChunk::sendDone(int step) {
  for (size_t i = 0; i < rounds_.size(); ++i)
    if (rounds_[i].step == step && rounds_[i].send) sendDone_[i] = 1;
  --sendsOut_;
}

void HalvingDoublingChunk::recvDone(int) {
  recvArrived_ = true;
  finishRecv(rounds_[cur_]);
  tryAdvance();
}

void HalvingDoublingChunk::finishRecv(const Round& r) {
  if (r.phase == Phase::kAbsorb) {  // the neighbour (lower) merged into this rank's values
    const void* in = inPlace() ? scratch_.get() : spec_.recv;
    reduce::apply(spec_.recv, in, spec_.send, spec_.count, spec_.dtype, spec_.op, 1);
    return;
  }
  if (r.phase != Phase::kScatter) return;  // the rest lands where it belongs
  const unsigned char* in = scratch_.get();
  const unsigned char* own =
      static_cast<const unsigned char*>(r.fromUser ? spec_.send : spec_.recv) + r.recvOff;
  bool lastRound = r.step == sched_.rounds;
  int divisor = (lastRound && spec_.op == priocclAvg) ? spec_.nranks : 1;
  reduce::apply(recvBuf() + r.recvOff, r.peerIsLower ? in : own, r.peerIsLower ? own : in,
                r.recvBytes / elem_, spec_.dtype, spec_.op, divisor);
}

// A round is over once its send is taken and its receive has arrived (and been merged).
void HalvingDoublingChunk::tryAdvance() {
  while (cur_ < rounds_.size()) {
    const Round& r = rounds_[cur_];
    if ((r.send && !sendTaken_) || (r.recv && !recvArrived_)) return;
    ++cur_;
    sendTaken_ = recvTaken_ = recvArrived_ = false;
  }
  pool_.give(std::move(scratch_));
}

bool HalvingDoublingChunk::finished() const {
  return cur_ == rounds_.size() && sendsOut_ == 0;
}

}  // namespace prioccl
