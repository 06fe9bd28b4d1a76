#include "api/clock_sync.h"

#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "common/error.h"
#include "common/log.h"

namespace prioccl::detail {
namespace {

// PRIOCCL_TIMELINE_CLOCK_SKEW_US (a testing aid): this rank's timeline clock runs rank x N us
// ahead, as if each rank were on a host with its own clock; the offset measured below must
// remove it. Read only when a timeline is on.
int64_t timelineSkewNs(int rank) {
  const char* v = std::getenv("PRIOCCL_TIMELINE_CLOCK_SKEW_US");
  if (!v || !*v) return 0;
  char* end = nullptr;
  errno = 0;
  double us = std::strtod(v, &end);
  if (errno || *end || !(std::fabs(us) <= 1e9)) {
    log(LogLevel::kWarn, "PRIOCCL_TIMELINE_CLOCK_SKEW_US=", v,
        " is not a number of microseconds in [-1e9, 1e9]; ignored");
    return 0;
  }
  return static_cast<int64_t>(us * 1000.0) * rank;
}

}  // namespace

// The timeline's common clock, Cristian's algorithm: each rank in turn sends rank 0 a few pings;
// rank 0 answers each with its clock reading and its origin (its clock when the exchange began).
// The round with the smallest round trip gives offset = t_rank0 - (t_send + rtt / 2), off by at
// most rtt / 2. steady_clock is CLOCK_MONOTONIC, one clock for all processes on a host, so there
// the offset comes out near zero; across hosts it corrects the hosts' different boot times.
// Collective over the bootstrap, blocking, before the transport exists.
TimelineClock measureClock(Bootstrap& bootstrap) {
  constexpr int kRounds = 10;
  TimelineClock c;
  const int rank = bootstrap.rank(), n = bootstrap.size();
  c.skewNs = timelineSkewNs(rank);
  auto local = [&c] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
               .count() +
           c.skewNs;
  };
  c.measured = true;
  c.rounds = kRounds;
  try {
    if (rank == 0) {
      int64_t reply[2] = {0, local()};
      c.originNs = reply[1];
      for (int peer = 1; peer < n; ++peer)
        for (int i = 0; i < kRounds; ++i) {
          int64_t ping = 0;
          bootstrap.recv(peer, &ping, sizeof ping);
          reply[0] = local();
          bootstrap.send(peer, reply, sizeof reply);
        }
      return c;
    }
    c.rttNs = INT64_MAX;
    for (int i = 0; i < kRounds; ++i) {
      int64_t sent = local(), reply[2] = {0, 0};
      bootstrap.send(0, &sent, sizeof sent);
      bootstrap.recv(0, reply, sizeof reply);
      int64_t rtt = local() - sent;
      if (rtt < c.rttNs) {
        c.rttNs = rtt;
        c.offsetNs = reply[0] - (sent + rtt / 2);
        c.originNs = reply[1];
      }
    }
  } catch (const Error& e) {
    // The timeline then falls back to this rank's own origin; the communicator itself goes on.
    log(LogLevel::kWarn, "PRIOCCL_TIMELINE: clock exchange with rank 0 failed (", e.what(),
        "); this rank's timeline keeps its own time origin");
    return TimelineClock{};
  }
  return c;
}

}  // namespace prioccl::detail
