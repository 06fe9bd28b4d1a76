#include "sim_fabric.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "algo/agreement.h"
#include "common/error.h"
#include "common/wire.h"
#include "reduce/reduce.h"

namespace prioccl::sim {

using detail::concat;
namespace {

// Without payload, what a message still carries: a control message (at most kControlBytes)
// whole, a longer one its head, which holds every algorithm's header (the agreement's is the
// largest).
constexpr size_t kHeadBytes = 256;
static_assert(sizeof(detail::AgreementHeader) <= kHeadBytes,
              "the agreement's header travels whole");

size_t carriedBytes(size_t bytes, bool payload) {
  return payload || bytes <= detail::kControlBytes ? bytes : kHeadBytes;
}

// What `bytes` take at `nsPerByte` (a link's, a copy's, a reduction's), in whole nanoseconds.
int64_t nsFor(size_t bytes, double nsPerByte) {
  return std::llround(static_cast<double>(bytes) * nsPerByte);
}

}  // namespace

SimFabric::SimFabric(int ranks, const FabricSpec& spec)
    : spec_(spec),
      latencyNs_(std::llround(spec.latencySeconds * 1e9)),
      cpuNs_(std::llround(spec.cpuPerMessageSeconds * 1e9)),
      intraLatencyNs_(std::llround(spec.intraLatencySeconds * 1e9)),
      nsPerByte_(8e9 / (spec.bitsPerSecond * spec.wireEfficiency)),
      intraNsPerByte_(8e9 / spec.intraBitsPerSecond),
      copyNsPerByte_(spec.copyBytesPerSecond > 0 ? 1e9 / spec.copyBytesPerSecond : 0),
      intraCopyNsPerByte_(spec.intraCopyBytesPerSecond > 0 ? 1e9 / spec.intraCopyBytesPerSecond
                                                           : 0),
      reduceNsPerByte_(spec.reduceBytesPerSecond > 0 ? 1e9 / spec.reduceBytesPerSecond : 0),
      cores_(static_cast<size_t>(std::max(spec.sharedCores, 0)), 0),
      ranks_(static_cast<size_t>(ranks)),
      nics_(static_cast<size_t>(
          spec.ranksPerHost > 0 ? (ranks + spec.ranksPerHost - 1) / spec.ranksPerHost : 0)) {
  if (ranks < 1 || !(spec.bitsPerSecond > 0) || spec.latencySeconds < 0 ||
      spec.cpuPerMessageSeconds < 0 || !(spec.wireEfficiency > 0 && spec.wireEfficiency <= 1) ||
      spec.ranksPerHost < 1 || !(spec.intraBitsPerSecond > 0) || spec.intraLatencySeconds < 0 ||
      spec.copyBytesPerSecond < 0 || spec.intraCopyBytesPerSecond < 0 ||
      spec.reduceBytesPerSecond < 0 || spec.sharedCores < 0 || spec.hostsPerLeaf < 0 ||
      !(spec.oversubscription >= 1))
    throw InvalidArgument(
        "SimFabric: ranks >= 1, positive rates, latencies and CPU costs >= 0, wire efficiency in "
        "(0, 1], ranks per host >= 1, shared cores >= 0 (0: one per rank), hosts per leaf >= 0 "
        "(0: one switch), oversubscription >= 1");
  if (spec.hostsPerLeaf > 0) {
    leaves_.resize((nics_.size() + static_cast<size_t>(spec.hostsPerLeaf) - 1) /
                   static_cast<size_t>(spec.hostsPerLeaf));
    leafNsPerByte_ = nsPerByte_ * spec.oversubscription / spec.hostsPerLeaf;
  }
  publishClock(0);
  detail::EngineClock::simulate(&clock_);
  tap_.skip = !spec.payload;
  reduce::tapArithmetic(&tap_);
}

SimFabric::~SimFabric() {
  detail::EngineClock::simulate(nullptr);
  reduce::tapArithmetic(nullptr);
}

void SimFabric::publishClock(int64_t t) {
  clock_ = TimePoint(std::chrono::nanoseconds(t));
}

int64_t SimFabric::beginRound(int r) {
  Rank& k = ranks_[r];
  k.clock = std::max(k.clock, now_);
  if (!cores_.empty() && k.clock == now_) {  // the core free soonest, if it is free now
    auto core = std::min_element(cores_.begin(), cores_.end());
    if (*core <= now_)
      k.core = static_cast<int>(core - cores_.begin());
    else
      k.clock = *core;  // put off, holding no core: whichever is free then takes the round
  }
  tap_.bytes = 0;  // what ran outside every round is nobody's
  k.roundStart = k.clock;
  publishClock(k.clock);
  return k.clock;
}

int64_t SimFabric::endRound(int r) {
  Rank& k = ranks_[r];
  chargeArithmetic(k);
  roundsCpuNs_ += k.clock - k.roundStart;
  if (k.core >= 0) {  // busy until the round's work is done
    cores_[static_cast<size_t>(k.core)] = std::max(cores_[static_cast<size_t>(k.core)], k.clock);
    k.core = -1;
  }
  publishClock(now_);
  return k.clock;
}

void SimFabric::chargeArithmetic(Rank& k) {
  if (tap_.bytes == 0) return;
  k.clock += nsFor(tap_.bytes, reduceNsPerByte_);
  tap_.bytes = 0;
  publishClock(k.clock);
}

void SimFabric::push(int64_t time, EventKind kind, int rank, uint64_t cookie,
                     std::shared_ptr<Message> message) {
  uint64_t epoch = ranks_[rank].epoch;
  events_.push(Event{time, seq_++, kind, rank, cookie, epoch, std::move(message)});
}

void SimFabric::send(int me, int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                     SendCompletion completion) {
  Rank& a = ranks_[me];
  Rank& b = ranks_[peer];
  const bool sameHost = hostOf(me) == hostOf(peer);
  chargeArithmetic(a);
  a.clock += cpuNs_ + nsFor(bytes, copyNsPerByte(me, peer));
  publishClock(a.clock);
  ++a.pending;
  auto m = std::make_shared<Message>();
  m->src = me;
  m->dst = peer;
  m->tag = tag;
  m->bytes = bytes;
  m->data.assign(static_cast<const unsigned char*>(buf),
                 static_cast<const unsigned char*>(buf) + carriedBytes(bytes, spec_.payload));
  m->sendCookie = cookie;
  m->sendEpoch = a.epoch;
  m->completion = completion;
  int64_t leftAt, arrives;
  if (sameHost) {  // through the host's memory: a's copies one at a time
    leftAt = std::max(a.clock, a.memoryOut) + nsFor(bytes, intraNsPerByte_);
    a.memoryOut = leftAt;
    arrives = leftAt + intraLatencyNs_;
  } else {
    Nic& out = nics_[hostOf(me)];
    Nic& in = nics_[hostOf(peer)];
    const int64_t wire = nsFor(bytes, nsPerByte_);
    leftAt = std::max(a.clock, out.out) + wire;  // the last byte out of a's host's NIC
    out.out = leftAt;
    int64_t crossed = leftAt;  // the last byte through the core, where it crosses one
    if (!leaves_.empty() && leafOf(hostOf(me)) != leafOf(hostOf(peer))) {
      // Cut through: each link starts on the message when its first byte arrives and it is
      // free, and lets its last byte go no sooner than the link before did.
      const int64_t leafWire = nsFor(bytes, leafNsPerByte_);
      int64_t first = leftAt - wire;
      auto pass = [&](int64_t& free) {
        crossed = free = std::max(crossed, std::max(first, free) + leafWire);
        first = crossed - leafWire;
      };
      pass(leaves_[static_cast<size_t>(leafOf(hostOf(me)))].out);
      pass(leaves_[static_cast<size_t>(leafOf(hostOf(peer)))].in);
    }
    // It reaches b's host's NIC a latency later, unless that NIC is still taking others.
    arrives = std::max(crossed + latencyNs_, in.in + wire);
    in.in = arrives;
  }
  a.messages += 1;
  b.messages += 1;
  ++messages_;
  a.bytes += bytes;
  b.bytes += bytes;
  bytes_ += bytes;
  // The transports' promise (transport.h): the others complete once their bytes have left (large
  // ones go by rendezvous in MPI and UCX, which the eager model does not wait for).
  if (!completesAtReceiver(completion, bytes))
    push(leftAt, EventKind::kSendDone, me, cookie, nullptr);
  push(arrives, EventKind::kArrive, peer, 0, std::move(m));
}

void SimFabric::recv(int me, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) {
  Rank& b = ranks_[me];
  chargeArithmetic(b);
  b.clock += cpuNs_;
  publishClock(b.clock);
  ++b.pending;
  auto u = b.unexpected.find({peer, tag});
  if (u != b.unexpected.end() && !u->second.empty()) {
    std::shared_ptr<Message> m = std::move(u->second.front());
    u->second.pop_front();
    if (u->second.empty()) b.unexpected.erase(u);
    land(*m, PostedRecv{buf, bytes, cookie}, b.clock);
    return;
  }
  b.posted[{peer, tag}].push_back(PostedRecv{buf, bytes, cookie});
}

void SimFabric::land(const Message& m, const PostedRecv& r, int64_t t) {
  if (m.bytes > r.bytes)
    throw InternalError(concat("sim: a message of ", m.bytes, " bytes from rank ", m.src,
                               " to rank ", m.dst, " for a receive of ", r.bytes));
  if (!m.data.empty()) std::memcpy(r.buf, m.data.data(), m.data.size());
  complete(m.dst, r.cookie, m.bytes);
  ranks_[m.dst].copyInNs += static_cast<double>(m.bytes) * copyNsPerByte(m.src, m.dst);
  wakeAt(m.dst, t);
  if (completesAtReceiver(m.completion, m.bytes) && m.sendEpoch == ranks_[m.src].epoch)
    push(t + latencyNs_, EventKind::kSendDone, m.src, m.sendCookie, nullptr);
}

void SimFabric::complete(int r, uint64_t cookie, size_t bytes) {
  Completion c;
  c.cookie = cookie;
  c.bytes = bytes;
  ranks_[r].ready.push_back(c);
}

size_t SimFabric::poll(int me, std::vector<Completion>& out) {
  Rank& k = ranks_[me];
  chargeArithmetic(k);
  const size_t n = k.ready.size();
  for (Completion& c : k.ready) out.push_back(std::move(c));
  k.ready.clear();
  k.pending -= n;
  k.clock += cpuNs_ * static_cast<int64_t>(n) + std::llround(k.copyInNs);
  k.copyInNs = 0;
  publishClock(k.clock);
  return n;
}

void SimFabric::cancelAll(int me) {
  Rank& k = ranks_[me];
  ++k.epoch;
  k.ready.clear();
  k.posted.clear();
  k.pending = 0;
  k.copyInNs = 0;
}

void SimFabric::wakeAt(int r, int64_t t) {
  Rank& k = ranks_[r];
  // One pending wake per rank, the earliest asked for: the round it gives asks again for what
  // it still needs (a later submission, the next tick), so later wakes would only be rounds with
  // nothing to do, and at a thousand ranks they filled the event queue.
  if (k.wakeAt >= 0 && k.wakeAt <= t) return;
  k.wakeAt = t;
  push(t, EventKind::kWake, r, 0, nullptr);
}

void SimFabric::advance(std::vector<int>& due) {
  now_ = events_.top().time;
  publishClock(now_);
  while (!events_.empty() && events_.top().time == now_) {
    Event e = events_.top();
    events_.pop();
    Rank& k = ranks_[e.rank];
    switch (e.kind) {
      case EventKind::kArrive: {
        auto p = k.posted.find({e.message->src, e.message->tag});
        if (p == k.posted.end() || p->second.empty()) {
          k.unexpected[{e.message->src, e.message->tag}].push_back(e.message);
          break;  // nothing for the engine to see yet
        }
        PostedRecv r = p->second.front();
        p->second.pop_front();
        if (p->second.empty()) k.posted.erase(p);
        land(*e.message, r, now_);
        due.push_back(e.rank);
        break;
      }
      case EventKind::kSendDone:
        if (e.epoch != k.epoch) break;  // withdrawn by cancelAll
        complete(e.rank, e.cookie, 0);
        due.push_back(e.rank);
        break;
      case EventKind::kWake:
        if (k.wakeAt != now_) break;  // superseded by an earlier one
        k.wakeAt = -1;
        due.push_back(e.rank);
        break;
    }
  }
}

}  // namespace prioccl::sim
