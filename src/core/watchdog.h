// The watchdog: lost peers, stall warnings and timeouts (see liveness.h and docs/testing.md
// "Reliability"). The engine runs it in its progress loop, at most every kPeriod, under the
// progress lock, and sends the heartbeats it finds due. It reads the op matcher, the chunk runner
// and the liveness table; a lost peer or an op past PRIOCCL_TIMEOUT_S throws an Error that names
// the op, the ranks it waits for and the setting, and the engine fails the communicator with it.
#pragma once

#include <chrono>
#include <string>

#include "common/engine_clock.h"
#include "core/chunk_runner.h"
#include "core/collective_runner.h"
#include "core/liveness.h"
#include "core/negotiator.h"
#include "core/op.h"
#include "core/op_matcher.h"
#include "prioccl/prioccl.hpp"

namespace prioccl::detail {

class Watchdog {
 public:
  using Clock = EngineClock;
  // Timeouts are seconds, so checking this often costs nothing and adds little.
  static constexpr std::chrono::milliseconds kPeriod{20};

  Watchdog(const Config& config, int rank, const Liveness& liveness, const Negotiator& negotiator,
           const OpMatcher& matcher, const ChunkRunner& runner)
      : timeoutSeconds_(config.timeoutSeconds),
        stallWarnSeconds_(config.stallWarnSeconds),
        rank_(rank),
        liveness_(liveness),
        negotiator_(negotiator),
        matcher_(matcher),
        runner_(runner) {}

  // True at most every kPeriod: time for heartbeats (when due) and check().
  bool due(Clock::time_point now) {
    if (now < next_) return false;
    next_ = now + kPeriod;
    return true;
  }
  // Throws for a lost endpoint whose peer's reason did not come in time (Liveness::endpointLost),
  // a lost peer or an op past the timeout; warns once per op stalled past the warning time.
  void check(Clock::time_point now);
  // The ops a collective backend runs are watched too (set once, before the first op).
  void watch(const CollectiveRunner* collectives) { collectives_ = collectives; }

 private:
  // For stall and timeout messages: the op, and what it waits for.
  static std::string describePending(const OpState& op);
  std::string waitingFor(const OpState& op, Clock::time_point now) const;

  const double timeoutSeconds_, stallWarnSeconds_;
  const int rank_;
  const Liveness& liveness_;
  const Negotiator& negotiator_;
  const OpMatcher& matcher_;
  const ChunkRunner& runner_;
  const CollectiveRunner* collectives_ = nullptr;
  Clock::time_point next_ = Clock::now();
};

}  // namespace prioccl::detail
