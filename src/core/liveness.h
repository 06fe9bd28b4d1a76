// Which peers are still there. A rank that dies (SIGKILL, OOM, a lost host) sends nothing more,
// and neither MPI nor UCX's shared-memory transports tell the survivors: they would wait forever.
// So every engine sends a heartbeat to its control peers each period (its progress thread wakes
// for it even when idle), counts any message from a peer as a sign of life, and declares a peer
// lost once it has been silent for the timeout. A rank whose communicator is destroyed says
// goodbye first, so its silence afterwards is not mistaken for death.
//
// Pure logic over times: the engine sends and receives the messages.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace prioccl::detail {

class Liveness {
 public:
  using Clock = std::chrono::steady_clock;

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
  // A peer silent for longer than the timeout and not gone, or -1.
  int lost(Clock::time_point now) const;
  double silentSeconds(int peer, Clock::time_point now) const;
  // For error messages: "rank 2 silent for 3.1 s, rank 3 destroyed its communicator" (only peers
  // silent for more than `least`, and those gone; "" if none).
  std::string report(Clock::time_point now, Clock::duration least) const;

 private:
  std::vector<int> peers_;
  Clock::duration timeout_, period_;
  Clock::time_point nextHeartbeat_;
  std::vector<Clock::time_point> lastHeard_;  // by rank
  std::vector<bool> left_;                    // by rank
};

}  // namespace prioccl::detail
