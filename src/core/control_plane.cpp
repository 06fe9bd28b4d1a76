#include "core/control_plane.h"

#include <algorithm>
#include <thread>

#include "common/log.h"

namespace prioccl::detail {
namespace {

// How long a failing rank waits for its abort notice to be delivered before tearing its receives
// down (a busy peer matches it within a poll; an idle one may sleep for a heartbeat period, and
// the transport's end waits for it then: transport.h, kDelivered).
constexpr std::chrono::milliseconds kAbortFlush(200);
// Longest wait at destroy for the peers' goodbyes (they destroy theirs at about the same time).
constexpr std::chrono::seconds kGoodbyeWait(30);

}  // namespace

ControlPlane::ControlPlane(Transport& transport, Transfers& transfers, int rank, int nranks,
                           double timeoutSeconds, size_t cacheCapacity, Host& host)
    : transport_(transport),
      transfers_(transfers),
      host_(host),
      rank_(rank),
      negotiator_(rank, nranks, cacheCapacity),
      liveness_(nranks, transfers.controlPeers(), timeoutSeconds, Clock::now()) {}

bool ControlPlane::sendNegotiation() {
  bool any = false;
  for (Negotiator::Outgoing& out : negotiator_.takeOutgoing()) {
    transfers_.sendControl(out.peer, std::move(out.bytes));
    any = true;
  }
  return any;
}

bool ControlPlane::onCompletion(const Transfers::Posted& p, const Completion& c,
                                Clock::time_point now, int* from, AbortNotice* notice) {
  if (p.kind == Transfers::Kind::kControlSend) {
    transfers_.controlSent(c.cookie);
    return false;
  }
  liveness_.heard(p.peer, now);
  size_t i = static_cast<size_t>(p.step);
  *from = transfers_.controlPeers()[i];
  ControlKind kind = negotiator_.onMessage(*from, transfers_.controlMessage(i), c.bytes, notice);
  if (kind == ControlKind::kAbort) return true;
  if (kind == ControlKind::kGoodbye) liveness_.left(*from);
  transfers_.repostControlReceive(i);
  return false;
}

void ControlPlane::heartbeat(Clock::time_point now) {
  if (!liveness_.heartbeatDue(now)) return;
  log(LogLevel::kTrace, "rank ", rank_, ": heartbeat");
  // Peers that said goodbye still listen until this rank's own goodbye: no need to skip them.
  sendToAll(encodeSignal(ControlKind::kHeartbeat), -1, std::chrono::milliseconds(0));
}

bool ControlPlane::holdForReason(int peer, const Completion& c, Clock::time_point now) {
  const std::vector<int>& direct = transfers_.controlPeers();
  if (std::find(direct.begin(), direct.end(), peer) != direct.end()) return false;
  if (!liveness_.awaitingCause())
    log(LogLevel::kInfo, "rank ", rank_, ": ", c.error, "; waiting up to ",
        std::chrono::duration<double>(Liveness::kCauseWait).count(), " s for rank ", peer,
        "'s reason through rank ", Negotiator::kCoordinator);
  liveness_.endpointLost(peer, c.code, c.error, now);
  return true;
}

void ControlPlane::tellAbort(const AbortNotice& notice, int skipPeer) {
  if (!saidGoodbye_)
    sendToAll(encodeAbort(notice), skipPeer, kAbortFlush, SendCompletion::kDelivered);
}

// Waiting for the peers' goodbyes makes sure nothing is in flight to this rank when its MPI
// communicator is freed: Open MPI hands a message for a freed communicator to the next one
// created with the same context id, where a stale heartbeat would take the sequence slot of a
// real message.
void ControlPlane::goodbye() {
  if (saidGoodbye_) return;
  saidGoodbye_ = true;
  try {
    sendToAll(encodeSignal(ControlKind::kGoodbye), -1, std::chrono::milliseconds(200));
  } catch (const Error& e) {
    host_.fail(e);
  }
  Clock::time_point deadline = Clock::now() + kGoodbyeWait;
  unsigned quiet = 0;
  for (;;) {
    bool waiting = false;
    for (int peer : transfers_.controlPeers()) waiting |= !liveness_.hasLeft(peer);
    Clock::time_point now = Clock::now();
    if (!waiting || host_.failed() || liveness_.lost(now) >= 0) return;
    // A peer's endpoint went away without its reason, which no longer comes: the communicator
    // fails as it would have at once (its peers are told; no goodbye comes from that peer).
    if (const Liveness::HeldFailure* h = liveness_.causeOverdue(now)) {
      host_.fail(Error(h->code, h->message));
      return;
    }
    if (now > deadline) {
      log(LogLevel::kWarn, "rank ", rank_, ": destroying the communicator without the goodbye of ",
          "every peer (", liveness_.report(now, Clock::duration::zero()),
          "): a message still in flight could reach a later communicator");
      transport_.cancelAll();  // the transport abandons its channel rather than reuse it
      return;
    }
    if (host_.pollOnce()) quiet = 0;
    if (++quiet > 64) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void ControlPlane::sendToAll(const std::vector<unsigned char>& bytes, int skip,
                             std::chrono::milliseconds limit, SendCompletion completion) {
  std::vector<uint64_t> cookies;
  for (int peer : transfers_.controlPeers()) {
    // Peers that said goodbye still listen, until this rank's own goodbye.
    if (peer != skip) cookies.push_back(transfers_.sendControl(peer, bytes, completion));
  }
  // Best effort: a dead peer's sends never leave, and nothing else waits on these.
  Clock::time_point deadline = Clock::now() + limit;
  std::vector<Completion> done;
  while (!cookies.empty() && Clock::now() < deadline) {
    done.clear();
    transport_.poll(done);
    for (const Completion& c : done) {
      cookies.erase(std::remove(cookies.begin(), cookies.end(), c.cookie), cookies.end());
      // A live engine handles everything (a peer's goodbye must not be lost); a failed one waits
      // for its notices to be delivered, and takes the peers' control messages unread meanwhile:
      // one that failed too waits likewise for its notice to this rank.
      if (host_.failed())
        takeUnread(c);
      else
        host_.dispatch(c);
    }
    if (done.empty()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void ControlPlane::takeUnread(const Completion& c) {
  const Transfers::Posted& p = transfers_.at(c.cookie);
  if (p.kind != Transfers::Kind::kControlRecv) return;
  size_t i = static_cast<size_t>(p.step);
  transfers_.release(c.cookie);
  if (c.ok) transfers_.repostControlReceive(i);
}

void ControlPlane::pollFailed() {
  std::vector<Completion> done;
  transport_.poll(done);
  for (const Completion& c : done) takeUnread(c);
}

}  // namespace prioccl::detail
