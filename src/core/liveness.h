// Which peers are still there. A rank that dies (SIGKILL, OOM, a lost host) sends nothing more,
// and neither MPI nor UCX's shared-memory transports tell the survivors: they would wait forever.
// So every engine sends a heartbeat to its control peers each period (its progress thread wakes
// for it even when idle), counts any message from a peer as a sign of life, and declares a peer
// lost once it has been silent for the timeout. A rank whose communicator is destroyed says
// goodbye first, so its silence afterwards is not mistaken for death.
//
// A peer whose endpoint goes away (a transfer with it fails with Completion::peerLost) may have
// died, or may have failed the communicator on purpose (a mismatch, an abort, a timeout) and
// closed its endpoints after telling its control peers why. Where its reason comes relayed by
// the coordinator, it can arrive after the closed endpoint shows: so that every rank reports the
// cause and not its echo, the first such failure is held for kCauseWait while the engine goes on
// listening (ControlPlane::holdForReason); an abort notice meanwhile fails the communicator with
// its reason, and once the wait is over the watchdog fails it with the held error.
//
// Pure logic over times: the engine sends and receives the messages.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/engine_clock.h"
#include "prioccl/prioccl.h"

namespace prioccl::detail {

class Liveness {
 public:
  using Clock = EngineClock;
  // How long a lost endpoint's failure waits for the peer's reason. The coordinator has it before
  // the endpoint closes (ControlPlane::tellAbort waits for its delivery) and relays it at once,
  // or fails at once on the peer's death and says so: a second covers ranks that share cores.
  static constexpr std::chrono::seconds kCauseWait{1};
  struct HeldFailure {
    int peer = -1;  // -1: none held
    priocclResult_t code = priocclSuccess;
    std::string message;
    Clock::time_point deadline;
  };

  // `peers`: the ranks this one exchanges heartbeats with. timeoutSeconds <= 0: off (no
  // heartbeats, nobody is ever declared lost).
  Liveness(int nranks, std::vector<int> peers, double timeoutSeconds, Clock::time_point now);

  bool enabled() const { return timeout_.count() > 0; }
  // Heartbeats go out this often: a tenth of the timeout, between 50 ms and 1 s.
  Clock::duration period() const { return period_; }
  // True when heartbeats are due now (then they count as sent).
  bool heartbeatDue(Clock::time_point now);
  void heard(int peer, Clock::time_point now);
  void left(int peer);
  bool hasLeft(int peer) const { return left_[peer]; }
  // The peers that said goodbye (destroyed their communicator), in rank order.
  std::vector<int> departed() const;
  // A peer silent for longer than the timeout and not gone, or -1.
  int lost(Clock::time_point now) const;
  double silentSeconds(int peer, Clock::time_point now) const;
  // For error messages: "rank 2 silent for 3.1 s, rank 3 destroyed its communicator" (only peers
  // silent for more than `least`, and those gone; "" if none).
  std::string report(Clock::time_point now, Clock::duration least) const;

  // A transfer with `peer` failed as its endpoint went away (see above): holds the failure
  // (`code`, `message`) until kCauseWait from `now`. Only the first is held; later ones add
  // nothing, as the communicator fails with one message.
  void endpointLost(int peer, priocclResult_t code, const std::string& message,
                    Clock::time_point now);
  bool awaitingCause() const { return held_.peer >= 0; }
  // The held failure once its wait is over (the communicator fails with it), else null.
  const HeldFailure* causeOverdue(Clock::time_point now) const {
    return awaitingCause() && now >= held_.deadline ? &held_ : nullptr;
  }

 private:
  std::vector<int> peers_;
  Clock::duration timeout_, period_;
  Clock::time_point nextHeartbeat_;
  std::vector<Clock::time_point> lastHeard_;  // by rank
  std::vector<bool> left_;                    // by rank
  HeldFailure held_;
};

}  // namespace prioccl::detail
