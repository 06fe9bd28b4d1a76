// Halving-doubling step machine; see halving_doubling.h.
#include "algo/halving_doubling.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {

HalvingDoublingChunk::HalvingDoublingChunk(const ChunkSpec& spec, ScratchPool& pool,
                                           Envelope* envelope)
    : spec_(spec),
      pool_(pool),
      envelope_(envelope),
      sched_(spec.rank, spec.nranks),
      elem_(reduce::dtypeSize(spec.dtype)),
      bytes_(spec.count * elem_),
      header_(envelope ? envelope->headerBytes() : 0) {
  buildRounds();
  sendDone_.assign(rounds_.size(), 0);
  retired_.reserve(rounds_.size() + 1);
  if (envelope_) {
    acc_ = pool_.take();
    envelope_->writeOwn(acc_.get());
    if (bytes_) std::memcpy(acc_.get() + header_, spec_.send, bytes_);
  }
  if (!rounds_.empty()) return;
  // One rank: the reduction of a single contribution is the contribution (Avg divides by 1).
  if (envelope_) payloadValid_ = envelope_->accepts(acc_.get());
  if (payloadValid_ && bytes_ && !inPlace()) std::memcpy(spec_.recv, spec_.send, bytes_);
}

HalvingDoublingChunk::~HalvingDoublingChunk() {
  pool_.give(std::move(scratch_));
  pool_.give(std::move(acc_));
  pool_.give(std::move(inbox_));
  for (auto& b : retired_) pool_.give(std::move(b));
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
  int back = s.lastStep();  // the return: recursive doubling's last step
  if (s.sitsOut) {
    rounds_.push_back({Phase::kHandOver, 0, s.rank + 1, true, false, false, true, 0, bytes_, 0, 0});
    rounds_.push_back(
        {Phase::kResult, back, s.rank + 1, false, true, false, false, 0, 0, 0, bytes_});
    return;
  }
  if (s.absorbs)
    rounds_.push_back({Phase::kAbsorb, 0, s.rank - 1, false, true, true, true, 0, 0, 0, bytes_});
  // Scattering, partner vrank ^ 2^i in round i: the range of blocks this rank is responsible for
  // halves every round (bit i of vrank picks the half it keeps); it sends the other half.
  int lo = 0, hi = 1 << s.rounds;
  auto span = [&](int from, int n) { return blockOffset(from + n) - blockOffset(from); };
  for (int i = 0; i < s.rounds; ++i) {
    int half = (hi - lo) / 2, peerV = s.vrank ^ (1 << i);
    bool upper = (s.vrank >> i) & 1;
    int keepLo = upper ? lo + half : lo, giveLo = upper ? lo : lo + half;
    rounds_.push_back({Phase::kScatter, 1 + i, s.realRank(peerV), true, true, peerV < s.vrank,
                       i == 0 && !s.absorbs, blockOffset(giveLo), span(giveLo, half),
                       blockOffset(keepLo), span(keepLo, half)});
    lo = keepLo;
    hi = keepLo + half;
  }
  // Gathering, the rounds in reverse: partners swap their ranges, which double every round.
  for (int i = s.rounds - 1, k = 0; i >= 0; --i, ++k) {
    int size = hi - lo, peerV = s.vrank ^ (1 << i);
    int peerLo = ((s.vrank >> i) & 1) ? lo - size : lo + size;
    rounds_.push_back({Phase::kGather, back + 1 + k, s.realRank(peerV), true, true, peerV < s.vrank,
                       false, blockOffset(lo), span(lo, size), blockOffset(peerLo),
                       span(peerLo, size)});
    lo = std::min(lo, peerLo);
    hi = lo + 2 * size;
  }
  if (s.absorbs)
    rounds_.push_back(
        {Phase::kReturn, back, s.rank - 1, true, false, false, false, 0, bytes_, 0, 0});
}

bool HalvingDoublingChunk::sendReady() const {
  return cur_ < rounds_.size() && rounds_[cur_].send && !sendTaken_;
}

Transfer HalvingDoublingChunk::takeSend() {
  const Round& r = rounds_[cur_];
  sendTaken_ = true;
  ++sendsOut_;
  Transfer t;
  if (envelope_ && r.phase != Phase::kGather) {
    t = envelopeSend(r);
  } else {
    const unsigned char* base = r.fromUser ? sendBuf() : recvBuf();
    t = Transfer{r.peer, r.step, const_cast<unsigned char*>(base) + r.sendOff, r.sendBytes};
  }
  tryAdvance();
  return t;
}

// [header | data]: the merged header so far and this round's part of the running values.
Transfer HalvingDoublingChunk::envelopeSend(const Round& r) {
  if (r.phase == Phase::kHandOver) return Transfer{r.peer, r.step, acc_.get(), header_ + bytes_};
  ScratchPool::Block msg = pool_.take();
  std::memcpy(msg.get(), acc_.get(), header_);
  size_t n = r.sendBytes;
  if (r.phase == Phase::kScatter) {
    if (n) std::memcpy(msg.get() + header_, acc_.get() + header_ + r.sendOff, n);
  } else {  // the return: the result, or the verdict alone when there is none
    n = payloadValid_ ? bytes_ : 0;
    if (n) std::memcpy(msg.get() + header_, spec_.recv, n);
  }
  Transfer t{r.peer, r.step, msg.get(), header_ + n};
  retired_.push_back(std::move(msg));
  return t;
}

// One receive at a time, posted when its round begins. Without an envelope, scattering receives
// land in the scratch, gathering ones (and the final result) in the receive buffer, where an
// earlier send of this chunk may still be reading: they wait for every earlier round's send
// (normally long done). With one, everything but the gathered ranges lands in message blocks.
bool HalvingDoublingChunk::recvReady() const {
  if (cur_ >= rounds_.size() || !rounds_[cur_].recv || recvTaken_) return false;
  Phase ph = rounds_[cur_].phase;
  if (ph == Phase::kScatter || ph == Phase::kAbsorb || (envelope_ && ph == Phase::kResult))
    return true;
  for (size_t i = 0; i < cur_; ++i)
    if (rounds_[i].send && !sendDone_[i]) return false;
  return true;
}

Transfer HalvingDoublingChunk::takeRecv() {
  const Round& r = rounds_[cur_];
  recvTaken_ = true;
  if (r.phase == Phase::kGather)
    return Transfer{r.peer, r.step, recvBuf() + r.recvOff, r.recvBytes};
  if (envelope_) {  // any peer's message fits, so a disagreeing one is read, not truncated
    inbox_ = pool_.take();
    received_ = 0;
    return Transfer{r.peer, r.step, inbox_.get(), header_ + envelope_->maxPayloadBytes(), false};
  }
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

void HalvingDoublingChunk::recvLength(int, size_t bytes) {
  received_ = bytes;
}

void HalvingDoublingChunk::recvDone(int) {
  recvArrived_ = true;
  finishRecv(rounds_[cur_]);
  tryAdvance();
}

void HalvingDoublingChunk::finishRecv(const Round& r) {
  if (r.phase == Phase::kGather) return;  // landed where it belongs
  if (envelope_) {
    if (r.phase == Phase::kResult) {        // adopt the verdict, and the result if there is one
      retired_.push_back(std::move(acc_));  // its hand-over send may still be in flight
      acc_ = std::move(inbox_);
      if (received_ < header_) std::memset(acc_.get(), 0, header_);
      payloadValid_ = received_ == header_ + bytes_ && envelope_->accepts(acc_.get());
      if (payloadValid_ && bytes_) std::memcpy(spec_.recv, acc_.get() + header_, bytes_);
      return;
    }
    mergeEnvelope(r);
    retired_.push_back(std::move(inbox_));
    if (r.phase == Phase::kScatter && r.step == sched_.rounds) {
      // Scattering is over: every rank holds the same verdict, and gathers only if all agree.
      gathering_ = payloadValid_ = payloadValid_ && envelope_->accepts(acc_.get());
      if (gathering_ && r.recvBytes)
        std::memcpy(recvBuf() + r.recvOff, acc_.get() + header_ + r.recvOff, r.recvBytes);
    }
    return;
  }
  if (r.phase == Phase::kAbsorb) {  // the neighbour (lower) merged into this rank's values
    const void* in = inPlace() ? scratch_.get() : spec_.recv;
    reduce::apply(spec_.recv, in, spec_.send, spec_.count, spec_.dtype, spec_.op, 1);
    return;
  }
  if (r.phase != Phase::kScatter) return;  // the result landed in place
  const unsigned char* in = scratch_.get();
  const unsigned char* own = (r.fromUser ? sendBuf() : recvBuf()) + r.recvOff;
  int divisor = (r.step == sched_.rounds && spec_.op == priocclAvg) ? spec_.nranks : 1;
  reduce::apply(recvBuf() + r.recvOff, r.peerIsLower ? in : own, r.peerIsLower ? own : in,
                r.recvBytes / elem_, spec_.dtype, spec_.op, divisor);
}

// Merges a received [header | part] into acc_: headers as recursive doubling merges them, the
// data only while every header so far agrees and the part has the expected length. A part of
// another length is passed on as a payload length no header can announce (not its own length,
// which may equal the whole payload's: a peer sending everything where a part is due), so the
// envelope always finds the message malformed.
void HalvingDoublingChunk::mergeEnvelope(const Round& r) {
  unsigned char* in = inbox_.get();
  size_t got = received_;
  if (got < header_) std::memset(in, 0, header_);  // malformed, never a stale header
  const bool partFits = got >= header_ && got - header_ == r.recvBytes;
  size_t own = envelope_->ownPayloadBytes();
  size_t theirs = partFits ? own : SIZE_MAX;
  unsigned char* acc = acc_.get();
  const unsigned char* lower = r.peerIsLower ? in : acc;
  const unsigned char* upper = r.peerIsLower ? acc : in;
  bool agree = envelope_->merge(acc, lower, r.peerIsLower ? theirs : own, upper,
                                r.peerIsLower ? own : theirs);
  payloadValid_ = payloadValid_ && agree && theirs == own;
  if (!payloadValid_) return;
  int divisor = (r.step == sched_.rounds && spec_.op == priocclAvg) ? spec_.nranks : 1;
  size_t off = header_ + r.recvOff;
  reduce::apply(acc + off, lower == in ? in + header_ : acc + off,
                upper == in ? in + header_ : acc + off, r.recvBytes / elem_, spec_.dtype, spec_.op,
                divisor);
}

// A round is over once its send is taken and its receive has arrived (and been merged). Without
// agreement the gathering rounds are skipped.
void HalvingDoublingChunk::tryAdvance() {
  while (cur_ < rounds_.size()) {
    const Round& r = rounds_[cur_];
    bool skip = r.phase == Phase::kGather && !gathering_;
    if (!skip && ((r.send && !sendTaken_) || (r.recv && !recvArrived_))) return;
    ++cur_;
    sendTaken_ = recvTaken_ = recvArrived_ = false;
  }
  pool_.give(std::move(scratch_));
}

bool HalvingDoublingChunk::finished() const {
  return cur_ == rounds_.size() && sendsOut_ == 0;
}

}  // namespace prioccl
