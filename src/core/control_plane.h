// What ranks tell each other besides data, over the control channel (transfers.h: one standing
// receive per control peer; rank 0 <-> every other rank): the negotiator's announces and
// decisions, heartbeats, goodbyes and abort notices; and what that traffic says about each peer
// (liveness.h). The engine hands it the control channel's completions and asks it to send. It
// calls back into the engine (Host) only while it waits for its own messages to leave: an abort
// notice before the transport is torn down, a heartbeat, the goodbye at destroy.
//
// Runs on the progress thread, under the engine's progress lock.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/engine_clock.h"
#include "common/wire.h"
#include "core/liveness.h"
#include "core/negotiator.h"
#include "core/transfers.h"
#include "prioccl/prioccl.hpp"
#include "transport.h"

namespace prioccl::detail {

class ControlPlane {
 public:
  using Clock = EngineClock;

  class Host {  // the engine
   public:
    virtual ~Host() = default;
    virtual void dispatch(const Completion& c) = 0;  // a completion that is not this plane's
    virtual bool pollOnce() = 0;      // polls the transport and dispatches; false: nothing came
    virtual bool failed() const = 0;  // the communicator has failed
    virtual void fail(const Error& e) = 0;
  };

  // `timeoutSeconds` <= 0: no heartbeats, and no peer is ever declared lost.
  ControlPlane(Transport& transport, Transfers& transfers, int rank, int nranks,
               double timeoutSeconds, size_t cacheCapacity, Host& host);

  Negotiator& negotiator() { return negotiator_; }
  const Negotiator& negotiator() const { return negotiator_; }
  const Liveness& liveness() const { return liveness_; }

  bool sendNegotiation();  // posts what the negotiator has to say; false: nothing
  // A transfer failed: true when that is no failure (a peer that said goodbye may have closed
  // its end under a heartbeat).
  bool failureIsBenign(const Transfers::Posted& p) const {
    return p.kind == Transfers::Kind::kControlSend && liveness_.hasLeft(p.peer);
  }
  void heard(int peer, Clock::time_point now) { liveness_.heard(peer, now); }
  // A control transfer completed. True: a peer's abort notice (from *from); its receive is not
  // posted again.
  bool onCompletion(const Transfers::Posted& p, const Completion& c, Clock::time_point now,
                    int* from, AbortNotice* notice);
  void heartbeat(Clock::time_point now);  // sends the heartbeats when due
  // A transfer with `peer` failed as the peer's endpoint went away (c.peerLost). True: the
  // failure is held for the peer's reason (Liveness::endpointLost), and the watchdog fails the
  // communicator with it if none comes. Only where the reason would come through the coordinator
  // (a peer that is not this rank's control peer): a control peer's own notice reaches this rank
  // before that peer closes its endpoints (tellAbort), and its death is reported at once.
  bool holdForReason(int peer, const Completion& c, Clock::time_point now);
  // Best effort: tells the peers but `skipPeer` that this rank failed (not after its goodbye),
  // once the caller has withdrawn its transfers (Transport::cancelAll) and posted the control
  // receives again, waiting a little for the notices to be delivered (matched by the peers)
  // while it takes the peers' control messages unread. Undelivered, the notices go on
  // (SendCompletion::kDelivered), and the transport's end waits a little for them: a peer that
  // has the reason before this rank's endpoints close never reports their closing instead.
  void tellAbort(const AbortNotice& notice, int skipPeer);
  // After the failure: one poll of the transport, so that notices still undelivered go on (a
  // UCX endpoint that never carried anything needs both ends' progress to be wired up), taking
  // the peers' control messages unread. The failed engine's rounds call it.
  void pollFailed();
  // Says goodbye (once), then waits for the peers' goodbyes. A goodbye tells the peers that this
  // rank's silence is not death, and is its last message to them.
  void goodbye();
  bool saidGoodbye() const { return saidGoodbye_; }

 private:
  // Posts `bytes` to each control peer but `skip`, then polls up to `limit` for them to leave.
  void sendToAll(const std::vector<unsigned char>& bytes, int skip, std::chrono::milliseconds limit,
                 SendCompletion completion = SendCompletion::kEndToEnd);

  // A failed engine's completion: a control receive is released and posted again, unread.
  void takeUnread(const Completion& c);

  Transport& transport_;
  Transfers& transfers_;
  Host& host_;
  const int rank_;
  Negotiator negotiator_;
  Liveness liveness_;
  bool saidGoodbye_ = false;
};

}  // namespace prioccl::detail
