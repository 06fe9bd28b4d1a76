#include "core/liveness.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace prioccl::detail {

Liveness::Liveness(int nranks, std::vector<int> peers, double timeoutSeconds, Clock::time_point now)
    : peers_(std::move(peers)),
      timeout_(std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(std::max(0.0, timeoutSeconds)))),
      period_(std::clamp<Clock::duration>(timeout_ / 10, std::chrono::milliseconds(50),
                                          std::chrono::seconds(1))),
      nextHeartbeat_(now),
      lastHeard_(nranks, now),
      left_(nranks, false) {}

bool Liveness::heartbeatDue(Clock::time_point now) {
  if (!enabled() || now < nextHeartbeat_) return false;
  nextHeartbeat_ = now + period_;
  return true;
}

void Liveness::heard(int peer, Clock::time_point now) {
  lastHeard_[peer] = now;
}

void Liveness::left(int peer) {
  left_[peer] = true;
}

int Liveness::lost(Clock::time_point now) const {
  if (!enabled()) return -1;
  for (int p : peers_)
    if (!left_[p] && now - lastHeard_[p] > timeout_) return p;
  return -1;
}

double Liveness::silentSeconds(int peer, Clock::time_point now) const {
  return std::chrono::duration<double>(now - lastHeard_[peer]).count();
}

std::vector<int> Liveness::departed() const {
  std::vector<int> out;
  for (int p : peers_)
    if (left_[p]) out.push_back(p);
  return out;
}

std::string Liveness::report(Clock::time_point now, Clock::duration least) const {
  std::string out;
  for (int p : peers_) {
    std::string item;
    if (left_[p])
      item = concat("rank ", p, " destroyed its communicator");
    else if (enabled() && now - lastHeard_[p] > least)
      item = concat("rank ", p, " silent for ", std::round(silentSeconds(p, now) * 10) / 10, " s");
    if (!item.empty()) out += (out.empty() ? "" : ", ") + item;
  }
  return out;
}

void Liveness::endpointLost(int peer, priocclResult_t code, const std::string& message,
                            Clock::time_point now) {
  if (awaitingCause()) return;
  held_ = {peer, code, message, now + kCauseWait};
}

}  // namespace prioccl::detail
