// The clock the engine's logic reads: timeouts, heartbeats, the stall rule, the credit tuner,
// the ops' times. Real time (steady_clock), unless a simulator (perf/sim) puts a virtual clock in
// its place, so that the library's own code runs on simulated time. Its time_point is
// steady_clock's, so readings mix with the code that keeps real time (threads' naps, the
// timeline's file, the watch on stuck transport calls).
#pragma once

#include <atomic>
#include <chrono>

namespace prioccl::detail {

struct EngineClock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr bool is_steady = true;

  static time_point now() noexcept {
    const time_point* simulated = simulated_.load(std::memory_order_relaxed);
    return simulated ? *simulated : std::chrono::steady_clock::now();
  }
  // From here on now() reads *clock, which the simulator advances (null: real time again). Only
  // while no engine of this process runs on real time: they all read the same clock.
  static void simulate(const time_point* clock) {
    simulated_.store(clock, std::memory_order_relaxed);
  }

 private:
  static inline std::atomic<const time_point*> simulated_{nullptr};
};

}  // namespace prioccl::detail
