#include "core/watchdog.h"

#include <algorithm>

#include "common/log.h"

namespace prioccl::detail {

void Watchdog::check(Clock::time_point now) {
  // A peer's endpoint went away and no reason came from it or the coordinator in time: the
  // transport's error is all there is.
  if (const Liveness::HeldFailure* held = liveness_.causeOverdue(now))
    fail(held->code, held->message);
  if (int lost = liveness_.lost(now); lost >= 0)
    fail(priocclRemoteError, "lost rank ", lost, ": nothing heard from it for ",
         liveness_.silentSeconds(lost, now), " s (PRIOCCL_TIMEOUT_S=", timeoutSeconds_,
         "): it died, hangs, or its network is down");
  auto idleFor = [&](const OpState& op) { return now - std::max(op.submitted, op.lastProgress); };
  auto limit = [](double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  Clock::duration timeout = limit(timeoutSeconds_), warn = limit(stallWarnSeconds_);
  // Only rank 0 hears from every rank. When a peer's link goes down, every rank's op stalls as it
  // goes silent; another rank's op would time out naming its ring neighbour (alive, and waiting
  // too), while rank 0 names the silent peer a moment later. So the other ranks give rank 0 that
  // moment (two heartbeat periods and half a second) before timing an op out themselves.
  if (timeout.count() > 0 && liveness_.enabled() && rank_ != Negotiator::kCoordinator)
    timeout += 2 * liveness_.period() + std::chrono::milliseconds(500);
  // An op is stuck when neither it nor anything ahead of it in its lane has moved.
  auto inspect = [&](OpState& op, Clock::time_point laneProgress) {
    // A join waits, as Horovod's, for as long as the others have work: a lost peer still fails
    // it (above), a slow one does not. A peer that destroyed its communicator without joining
    // never will (its join would have finished every rank's): the join fails naming it, on the
    // coordinator (which hears every rank's goodbye) and so on every rank.
    if (op.kind == OpState::Kind::kJoin) {
      if (std::vector<int> gone = liveness_.departed(); !gone.empty()) {
        fail(priocclRemoteError, describePending(op), ": rank", gone.size() > 1 ? "s " : " ",
             commaList(gone), " destroyed ",
             gone.size() > 1 ? "their communicators" : "its communicator",
             " without joining: every rank must call join()");
      }
      return;
    }
    Clock::duration idle = std::min(idleFor(op), now - laneProgress);
    if (timeout.count() > 0 && idle > timeout)
      fail(priocclTimeout, describePending(op), " made no progress for ",
           std::chrono::duration<double>(idle).count(), " s (PRIOCCL_TIMEOUT_S=", timeoutSeconds_,
           "): ", waitingFor(op, now));
    if (warn.count() > 0 && idle > warn && !op.stallWarned) {
      op.stallWarned = true;
      // Printed whatever PRIOCCL_DEBUG says (as Horovod's stall warnings): a job that seems to
      // hang must say why. PRIOCCL_STALL_WARN_S=0 silences it.
      logLine(LogLevel::kWarn,
              concat("rank ", rank_, ": stalled for ", std::chrono::duration<double>(idle).count(),
                     " s: ", describePending(op), ": ", waitingFor(op, now)));
    }
  };
  if (timeout.count() == 0 && warn.count() == 0) return;
  matcher_.forEachWaiting([&](OpState& op, bool agreed) {
    // Awaiting a decision: only the op itself can move. Awaiting its turn: the ops before it.
    inspect(op, agreed ? runner_.laneProgress(kUnnamedLane) : op.submitted);
  });
  runner_.forEachOp(inspect);
  if (collectives_) collectives_->forEachOp(inspect);
}

std::string Watchdog::describePending(const OpState& op) {
  return concat(op.pointToPoint() ? "" : concat(kindName(op.kind), " "),
                describeOp(op, op.occurrence), " of priority ", op.priority);
}

// Which ranks the op waits on: for one still being matched, those that have not submitted it;
// for one moving data, those whose messages have not arrived or been taken.
std::string Watchdog::waitingFor(const OpState& op, Clock::time_point now) const {
  std::string silent = liveness_.report(now, std::chrono::seconds(2) + liveness_.period());
  std::string tail = silent.empty() ? "" : concat("; ", silent);
  if (!op.pointToPoint() && matcher_.awaitingDecision(op)) {
    if (rank_ != Negotiator::kCoordinator)
      return concat("not every rank has submitted it (rank 0's log names them)", tail);
    auto [key, occurrence] = OpMatcher::announced(op);
    std::string ranks = commaList(negotiator_.missingRanks(key, occurrence));
    return concat("ranks ", ranks.empty() ? "?" : ranks, " have not submitted it", tail);
  }
  if (collectives_ && !op.pointToPoint()) return collectives_->waitingFor(op) + tail;
  return runner_.waitingFor(op) + tail;
}

}  // namespace prioccl::detail
