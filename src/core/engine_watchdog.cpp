// The engine's watchdog: heartbeats, lost peers, stall warnings and timeouts (see liveness.h and
// docs/testing.md "Reliability"). Runs in the progress loop, rate-limited, under the progress lock.
#include <algorithm>
#include <chrono>
#include <map>

#include "common/log.h"
#include "core/engine.h"

namespace prioccl::detail {
namespace {

// Timeouts are seconds, so checking this often costs nothing and adds little.
constexpr std::chrono::milliseconds kWatchPeriod(20);

}  // namespace

void Engine::watchdog() {
  Clock::time_point now = Clock::now();
  if (now < nextWatch_) return;
  nextWatch_ = now + kWatchPeriod;
  if (liveness_.heartbeatDue(now)) {
    log(LogLevel::kTrace, "rank ", rank_, ": heartbeat");
    // Peers that said goodbye still listen until this rank's own goodbye: no need to skip them.
    sendToPeers(encodeSignal(ControlKind::kHeartbeat), -1, std::chrono::milliseconds(0));
  }
  if (int lost = liveness_.lost(now); lost >= 0)
    fail(priocclRemoteError, "lost rank ", lost, ": nothing heard from it for ",
         liveness_.silentSeconds(lost, now), " s (PRIOCCL_TIMEOUT_S=", config_.timeoutSeconds,
         "): it died, hangs, or its network is down");
  auto idleFor = [&](const OpState& op) { return now - std::max(op.submitted, op.lastProgress); };
  auto limit = [](double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  };
  Clock::duration timeout = limit(config_.timeoutSeconds), warn = limit(config_.stallWarnSeconds);
  // An op is stuck when neither it nor anything ahead of it in its lane has moved.
  auto check = [&](OpState& op, Clock::time_point laneProgress) {
    Clock::duration idle = std::min(idleFor(op), now - laneProgress);
    if (timeout.count() > 0 && idle > timeout)
      fail(priocclTimeout, describePending(op), " made no progress for ",
           std::chrono::duration<double>(idle).count(),
           " s (PRIOCCL_TIMEOUT_S=", config_.timeoutSeconds, "): ", waitingFor(op));
    if (warn.count() > 0 && idle > warn && !op.stallWarned) {
      op.stallWarned = true;
      // Printed whatever PRIOCCL_DEBUG says (as Horovod's stall warnings): a job that seems to
      // hang must say why. PRIOCCL_STALL_WARN_S=0 silences it.
      logLine(LogLevel::kWarn,
              concat("rank ", rank_, ": stalled for ", std::chrono::duration<double>(idle).count(),
                     " s: ", describePending(op), ": ", waitingFor(op)));
    }
  };
  if (timeout.count() == 0 && warn.count() == 0) return;
  matcher_.forEachWaiting([&](OpState& op, bool agreed) {
    // Awaiting a decision: only the op itself can move. Awaiting its turn: the ops before it.
    check(op, agreed ? lanes_[kUnnamedLane].lastProgress : op.submitted);
  });
  lanes_.forEachOp([&](const LiveOp& live, const LaneTable::Lane& lane) {
    if (!live.op->ended) check(*live.op, lane.lastProgress);
  });
  if (inline_.op) check(*inline_.op, lanes_[kAgreeLane].lastProgress);
}

std::string Engine::describePending(const OpState& op) const {
  return concat(op.kind == OpState::Kind::kAllReduce ? "allreduce " : "",
                describeOp(op, op.occurrence), " of priority ", op.priority);
}

// Which ranks the op waits on: for one still being matched, those that have not submitted it;
// for one moving data, those whose messages have not arrived or been taken.
std::string Engine::waitingFor(const OpState& op) const {
  Clock::time_point now = Clock::now();
  std::string silent = liveness_.report(now, std::chrono::seconds(2) + liveness_.period());
  std::string tail = silent.empty() ? "" : concat("; ", silent);
  if (op.kind == OpState::Kind::kAllReduce && matcher_.awaitingDecision(op)) {
    if (rank_ != Negotiator::kCoordinator)
      return concat("not every rank has submitted it (rank 0's log names them)", tail);
    std::string ranks;
    for (int r : negotiator_.missingRanks(keyHash(op), op.occurrence))
      ranks += concat(ranks.empty() ? "" : ", ", r);
    return concat("ranks ", ranks.empty() ? "?" : ranks, " have not submitted it", tail);
  }
  std::map<int, int> recvs, sends;  // peer -> transfers outstanding
  transfers_.forEachPosted([&](const Posted& p) {
    if (p.kind != Kind::kDataRecv && p.kind != Kind::kDataSend) return;
    const Slot* slot = lanes_.find(p.lane, p.gid);
    const OpState* owner = isInline(p.lane, p.gid) ? inline_.op.get()
                           : slot                  ? slot->live->op.get()
                                                   : nullptr;
    if (owner == &op) ++(p.kind == Kind::kDataRecv ? recvs : sends)[p.peer];
  });
  auto list = [](const std::map<int, int>& m) {
    std::string out;
    for (const auto& [peer, n] : m) out += concat(out.empty() ? "" : ", ", peer);
    return out;
  };
  std::string what;
  if (!recvs.empty()) what = concat("waiting for data from rank(s) ", list(recvs));
  if (!sends.empty())
    what += concat(what.empty() ? "" : "; ", "sends to rank(s) ", list(sends), " not taken");
  if (what.empty()) {
    // An unnamed op joins the unnamed data lane once agreed, after the older unnamed ops.
    bool moving = false;
    for (const LiveOp& live : lanes_[kUnnamedLane].live) moving |= live.op.get() == &op;
    what = op.kind == OpState::Kind::kAllReduce && !op.named && !moving
               ? "waiting for its agreement with the other ranks or for older unnamed ops"
               : "waiting behind older ops on the same ranks";
  }
  return what + tail;
}

}  // namespace prioccl::detail
