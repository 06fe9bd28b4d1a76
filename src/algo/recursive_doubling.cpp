// Recursive doubling step machine; see recursive_doubling.h.
#include "algo/recursive_doubling.h"

#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {

RdSchedule::RdSchedule(int r, int p) : rank(r), nranks(p), rounds(0) {
  int p2 = 1;
  while (p2 * 2 <= p) {
    p2 *= 2;
    ++rounds;
  }
  extra = p - p2;
  sitsOut = r < 2 * extra && r % 2 == 0;
  absorbs = r < 2 * extra && r % 2 == 1;
  vrank = sitsOut ? -1 : (r < 2 * extra ? r / 2 : r - extra);
}

int RdSchedule::steps(int nranks) {
  return RdSchedule(0, nranks).rounds + 2;
}

RecursiveDoublingChunk::RecursiveDoublingChunk(const ChunkSpec& spec, ScratchPool& pool,
                                               Envelope* envelope)
    : spec_(spec),
      pool_(pool),
      envelope_(envelope),
      sched_(spec.rank, spec.nranks),
      elem_(reduce::dtypeSize(spec.dtype)),
      header_(envelope ? envelope->headerBytes() : 0),
      payload_(envelope ? envelope->ownPayloadBytes() : spec.count * elem_) {
  buildExchanges();
  acc_ = pool_.take();
  if (envelope_) envelope_->writeOwn(acc_.get());
  if (payload_ > 0) std::memcpy(acc_.get() + header_, spec_.send, payload_);
  retired_.reserve(xs_.size());
  if (xs_.empty()) complete();  // one rank: the result is its own data
}

RecursiveDoublingChunk::~RecursiveDoublingChunk() {
  pool_.give(std::move(acc_));
  for (auto& x : xs_) pool_.give(std::move(x.inbox));
  for (auto& b : retired_) pool_.give(std::move(b));
}

void RecursiveDoublingChunk::buildExchanges() {
  const RdSchedule& s = sched_;
  xs_.reserve(static_cast<size_t>(s.rounds) + 2);
  if (s.sitsOut) {
    xs_.push_back({0, s.rank + 1, true, false, false});
    xs_.push_back({s.lastStep(), s.rank + 1, false, true, false});
    return;
  }
  if (s.absorbs) xs_.push_back({0, s.rank - 1, false, true, true});
  for (int i = 0; i < s.rounds; ++i) {
    int peerV = s.vrank ^ (1 << i);
    xs_.push_back({1 + i, s.realRank(peerV), true, true, peerV < s.vrank});
  }
  if (s.absorbs) xs_.push_back({s.lastStep(), s.rank - 1, true, false, false});
}

bool RecursiveDoublingChunk::sendReady() const {
  return cur_ < xs_.size() && xs_[cur_].send && !sendTaken_;
}

Transfer RecursiveDoublingChunk::takeSend() {
  const Exchange& x = xs_[cur_];
  sendTaken_ = true;
  ++sendsOut_;
  Transfer t{x.peer, x.step, acc_.get(), messageBytes()};
  tryAdvance();
  return t;
}

// Receives go up front, each into its own block: a peer ahead of us never waits on our posting.
bool RecursiveDoublingChunk::recvReady() const {
  for (size_t i = recvsPosted_; i < xs_.size(); ++i)
    if (xs_[i].recv) return true;
  return false;
}

Transfer RecursiveDoublingChunk::takeRecv() {
  while (!xs_[recvsPosted_].recv) ++recvsPosted_;
  Exchange& x = xs_[recvsPosted_++];
  x.inbox = pool_.take();
  if (!envelope_) return Transfer{x.peer, x.step, x.inbox.get(), messageBytes()};
  return Transfer{x.peer, x.step, x.inbox.get(), header_ + envelope_->maxPayloadBytes(), false};
}

void RecursiveDoublingChunk::sendDone(int) {
  --sendsOut_;
}

size_t RecursiveDoublingChunk::recvIndex(int step) const {
  for (size_t i = 0; i < xs_.size(); ++i)
    if (xs_[i].step == step && xs_[i].recv) return i;
  return xs_.size();
}

void RecursiveDoublingChunk::recvLength(int step, size_t bytes) {
  size_t i = recvIndex(step);
  if (i < xs_.size()) xs_[i].received = static_cast<long long>(bytes);
}

void RecursiveDoublingChunk::recvDone(int step) {
  size_t i = recvIndex(step);
  if (i < xs_.size() && xs_[i].received < 0)
    xs_[i].received = static_cast<long long>(messageBytes());
  tryAdvance();
}

// The current exchange is over once its send is taken and its data merged; then the next one.
void RecursiveDoublingChunk::tryAdvance() {
  while (cur_ < xs_.size()) {
    const Exchange& x = xs_[cur_];
    if (x.send && !sendTaken_) return;
    if (x.recv) {
      if (x.received < 0) return;
      merge(cur_);
    }
    ++cur_;
    sendTaken_ = false;
  }
  if (!done_) complete();
}

void RecursiveDoublingChunk::merge(size_t i) {
  Exchange& x = xs_[i];
  unsigned char* in = x.inbox.get();
  size_t got = static_cast<size_t>(x.received);
  // A short message: its header is treated as all zeros (malformed), never as whatever an
  // earlier chunk left in the block (found by tests/fuzz/fuzz_chunk_steps).
  if (got < header_) std::memset(in, 0, header_);
  size_t inPayload = got >= header_ ? got - header_ : 0;
  bool ok = got >= header_;
  if (!x.send) {
    // Step 0 of an absorbing rank merges; the last step of a rank that sat out adopts the result.
    if (x.step != 0) {
      ok = ok && inPayload == payload_;
      payloadValid_ = payloadValid_ && ok;
      retired_.push_back(std::move(acc_));
      acc_ = std::move(x.inbox);
      return;
    }
  }
  const unsigned char* lower = x.peerIsLower ? in : acc_.get();
  const unsigned char* upper = x.peerIsLower ? acc_.get() : in;
  size_t lowerPayload = x.peerIsLower ? inPayload : payload_;
  size_t upperPayload = x.peerIsLower ? payload_ : inPayload;
  if (ok && envelope_) ok = envelope_->merge(in, lower, lowerPayload, upper, upperPayload);
  ok = ok && inPayload == payload_;
  payloadValid_ = payloadValid_ && ok;
  if (payloadValid_ && payload_ > 0) {
    bool lastRound = x.step == sched_.rounds;
    int divisor = (lastRound && spec_.op == priocclAvg) ? spec_.nranks : 1;
    reduce::apply(in + header_, lower + header_, upper + header_, payload_ / elem_, spec_.dtype,
                  spec_.op, divisor);
  }
  retired_.push_back(std::move(acc_));
  acc_ = std::move(x.inbox);
}

void RecursiveDoublingChunk::complete() {
  done_ = true;
  // A disagreeing op's buffer stays untouched.
  if (envelope_ && !envelope_->accepts(acc_.get())) payloadValid_ = false;
  if (!payloadValid_ || payload_ == 0) return;
  if (xs_.empty() && spec_.send == spec_.recv) return;
  std::memcpy(spec_.recv, acc_.get() + header_, payload_);
}

bool RecursiveDoublingChunk::finished() const {
  return done_ && sendsOut_ == 0;
}

}  // namespace prioccl
