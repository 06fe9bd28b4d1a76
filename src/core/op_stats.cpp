#include "core/op_stats.h"

#include "common/log.h"
#include "core/op_matcher.h"

namespace prioccl::detail {
namespace {

// The op's track in the timeline, the same on every rank. Unnamed ops, named ops and point to
// point ops number themselves separately (globalSeq), so each kind gets its own range of
// track ids: small numbers, exact as JSON doubles, read as "op N" in the viewers.
uint64_t timelineTrack(const OpState& op) {
  if (op.globalSeq >= kPointToPointSeqBase)
    return 2'000'000'000 + (op.globalSeq - kPointToPointSeqBase);
  return op.named ? 1'000'000'000 + op.globalSeq : op.globalSeq;
}

}  // namespace

void OpStats::matched(const OpState& op, Clock::time_point now) {
  add(counters_.queueWaitNs,
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - op.submitted).count()));
  if (!timeline_->enabled()) return;
  static const std::string kUnnamed;
  const std::string& key = op.named ? op.key : kUnnamed;
  uint64_t track = timelineTrack(op);
  timeline_->nameTrack(track, op.named
                                  ? concat("op '", key, "' #", op.occurrence, " p", op.priority)
                                  : concat("op ", track, " p", op.priority));
  timeline_->span(
      "QUEUE", track, op.submitted, now,
      {{"priority", op.priority}, {"count", static_cast<int64_t>(op.count)}, {"key", 0, &key}});
}

void OpStats::trace(const OpState& op, uint64_t chunkIndex, int step, size_t bytes, bool isRecv,
                    Clock::time_point start, Clock::time_point done) {
  std::initializer_list<TimelineArg> args = {{"priority", op.priority},
                                             {"chunk", static_cast<int64_t>(chunkIndex)},
                                             {"step", static_cast<int64_t>(step)},
                                             {"bytes", static_cast<int64_t>(bytes)}};
  timeline_->span(isRecv ? "RECV" : "SEND", timelineTrack(op), start, done, args);
  if (isRecv) timeline_->span("REDUCE", timelineTrack(op), done, Clock::now(), args);
}

std::string OpStats::startTimeline(const std::string& path) {
  timeline_.reset();  // closes the open one (valid JSON) before a new one may take its path
  timeline_ = std::make_unique<Timeline>(path, rank_, nranks_, clock_, communicator_);
  return timeline_->enabled() ? timeline_->path() : std::string();
}

void OpStats::launched(const OpState& op, uint64_t chunk, size_t bytes, Clock::time_point start,
                       Clock::time_point done) {
  chunkCompleted();
  if (!timeline_->enabled()) return;
  timeline_->span("COLL", timelineTrack(op), start, done,
                  {{"priority", op.priority},
                   {"chunk", static_cast<int64_t>(chunk)},
                   {"bytes", static_cast<int64_t>(bytes)}});
}

priocclCounters_t OpStats::snapshot() const {
  priocclCounters_t c{};
  auto get = [](const std::atomic<uint64_t>& v) { return v.load(std::memory_order_relaxed); };
  c.opsSubmitted = get(counters_.opsSubmitted);
  c.opsCompleted = get(counters_.opsCompleted);
  c.opsFailed = get(counters_.opsFailed);
  c.chunksCompleted = get(counters_.chunksCompleted);
  c.sendsPosted = get(counters_.sendsPosted);
  c.bytesSent = get(counters_.bytesSent);
  c.bytesReceived = get(counters_.bytesReceived);
  c.preemptions = get(counters_.preemptions);
  c.queueWaitSeconds = 1e-9 * static_cast<double>(get(counters_.queueWaitNs));
  return c;
}

void OpStats::reset() {
  for (std::atomic<uint64_t>* c :
       {&counters_.opsSubmitted, &counters_.opsCompleted, &counters_.opsFailed,
        &counters_.chunksCompleted, &counters_.sendsPosted, &counters_.bytesSent,
        &counters_.bytesReceived, &counters_.preemptions, &counters_.queueWaitNs})
    c->store(0, std::memory_order_relaxed);
}

}  // namespace prioccl::detail
