// PRIOCCL_TIMELINE: a Chrome-trace JSON file (chrome://tracing, Perfetto) per rank with one track
// per op, so preemption can be seen. The file is valid JSON after every flush, so a process
// killed mid-run still leaves a readable trace. Timestamps are on rank 0's clock, measured from
// rank 0's origin (see TimelineClock), so scripts/prioccl-timeline can merge the ranks' files.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace prioccl::detail {

// How this rank's clock maps to rank 0's: rank0_time = local_time + offsetNs, where local_time is
// steady_clock + skewNs. Measured at communicator creation (measureClock, api/clock_sync.h),
// only with a timeline.
struct TimelineClock {
  bool measured = false;  // false: one rank, or no timeline: the rank's own origin, offset 0
  int64_t offsetNs = 0;   // add to a local steady_clock reading to get rank 0's
  int64_t originNs = 0;   // rank 0's steady_clock reading taken as time 0 by every rank
  int64_t rttNs = 0;      // round trip of the exchange the offset comes from (error <= rtt/2)
  int rounds = 0;
  int64_t skewNs = 0;  // PRIOCCL_TIMELINE_CLOCK_SKEW_US (testing aid) applied to this rank
};

// One "args" entry of an event: a number, or a string when `text` is set.
struct TimelineArg {
  const char* name;
  int64_t number = 0;
  const std::string* text = nullptr;
};

class Timeline {
 public:
  // `path` may contain %r, replaced by the rank; without it, ranks other than 0 write
  // path with ".rank<r>" inserted before its extension, and a process's communicator number
  // `communicator` > 0 (nextCommunicator()) inserts ".comm<n>". An empty path disables the
  // timeline.
  Timeline(const std::string& path, int rank, int nranks, const TimelineClock& clock = {},
           int communicator = 0);
  // A number for each communicator of the process, from 0: their files do not collide.
  static int nextCommunicator();
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  bool enabled() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  static std::string pathFor(const std::string& path, int rank, int nranks);

  using Clock = std::chrono::steady_clock;
  // A complete event on track `op` from `start` to `end`.
  void span(const char* phase, uint64_t op, Clock::time_point start, Clock::time_point end,
            std::initializer_list<TimelineArg> args);
  // Names track `op` in the viewers (a "thread_name" metadata event).
  void nameTrack(uint64_t op, const std::string& name);
  void flush();

 private:
  void append(const std::string& event);  // one serialised event object
  int fd_ = -1;
  int rank_;
  std::string path_;
  std::string pending_;
  long long end_ = 0;    // file offset of the closing "]"
  int64_t shiftNs_ = 0;  // added to a time_since_epoch: rank 0's clock, minus rank 0's origin
};

}  // namespace prioccl::detail
