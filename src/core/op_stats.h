// What a communicator counts and records about its ops: the public counters
// (priocclCommGetCounters) and the PRIOCCL_TIMELINE trace. Counters are read from any thread;
// the timeline is written by the progress thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/engine_clock.h"
#include "common/timeline.h"
#include "core/op.h"
#include "prioccl/prioccl.h"

namespace prioccl::detail {

class OpStats {
 public:
  using Clock = EngineClock;

  OpStats(const std::string& timelinePath, int rank, int nranks, const TimelineClock& clock)
      : rank_(rank),
        nranks_(nranks),
        communicator_(Timeline::nextCommunicator()),
        clock_(clock),
        timeline_(std::make_unique<Timeline>(timelinePath, rank, nranks, clock, communicator_)) {}

  void opSubmitted() { add(counters_.opsSubmitted, 1); }
  void opEnded(bool ok) { add(ok ? counters_.opsCompleted : counters_.opsFailed, 1); }
  void chunkCompleted() { add(counters_.chunksCompleted, 1); }
  void sendPosted() { add(counters_.sendsPosted, 1); }
  void preempted() { add(counters_.preemptions, 1); }

  // The op's identity is now agreed by every rank: the end of its QUEUE phase.
  void matched(const OpState& op, Clock::time_point now);
  // A data transfer of chunk `chunkIndex` of `op` ended (a RECV span is followed by its REDUCE).
  void transferred(const OpState& op, uint64_t chunkIndex, int step, size_t bytes, bool isRecv,
                   Clock::time_point start, Clock::time_point done) {
    add(isRecv ? counters_.bytesReceived : counters_.bytesSent, bytes);
    // A transfer posted before a timeline started at run time has no start.
    if (timeline_->enabled() && start != Clock::time_point())
      trace(op, chunkIndex, step, bytes, isRecv, start, done);
  }

  // A collective backend's launch `chunk` of `op` ran from `start` to `done`: a COLL span.
  void launched(const OpState& op, uint64_t chunk, size_t bytes, Clock::time_point start,
                Clock::time_point done);

  priocclCounters_t snapshot() const;
  void reset();  // counters restart from zero (after the communicator's own ops at creation)

  bool timelineEnabled() const { return timeline_->enabled(); }
  void flushTimeline() { timeline_->flush(); }
  // At run time (Horovod's start_timeline/stop_timeline): a new timeline into `path` (the file
  // naming as PRIOCCL_TIMELINE's; an open one is closed first), or none. The clock is the one
  // measured at creation: aligned to rank 0 only where PRIOCCL_TIMELINE was set then. Returns
  // the file's path, "" when it cannot be written (a warning says why).
  std::string startTimeline(const std::string& path);
  void stopTimeline() { timeline_ = std::make_unique<Timeline>("", rank_, nranks_); }

 private:
  static void add(std::atomic<uint64_t>& c, uint64_t n) {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  void trace(const OpState& op, uint64_t chunkIndex, int step, size_t bytes, bool isRecv,
             Clock::time_point start, Clock::time_point done);

  struct Counters {
    std::atomic<uint64_t> opsSubmitted{0}, opsCompleted{0}, opsFailed{0}, chunksCompleted{0},
        sendsPosted{0}, bytesSent{0}, bytesReceived{0}, preemptions{0}, queueWaitNs{0};
  } counters_;
  const int rank_, nranks_, communicator_;
  const TimelineClock clock_;
  std::unique_ptr<Timeline> timeline_;  // never null; replaced at run time
};

}  // namespace prioccl::detail
