// The inline path: a blocking unnamed all-reduce small enough for its agreement to reduce it
// (ChunkRunner::carries), submitted while the engine is idle, runs
// its agreement chunk directly: posted at submission, driven by completions, its sends posted the
// moment they are ready. No lane entry, live-chunk map, ready queue or scheduler pass, none of
// which a lone op needs, and which cost a small op more CPU than its exchange (issue 19,
// docs/benchmarks.md).
//
// Its identity (the agreement lane's next chunk), tags and messages are those the lanes would
// give it, so a rank on this path interoperates with ranks that took the lanes (busy engines,
// async ops). It keeps the unnamed sequence counters, stays visible to the watchdog
// (timeouts, stall warnings, waitingFor), and fails with the communicator (failWith, abort:
// ChunkRunner::clear).
// Ops submitted while it is in flight take the lanes as usual; the unnamed data lane takes them
// in sequence once the inline op has concluded (OpMatcher::concluded).
#include <chrono>

#include "common/log.h"
#include "core/engine.h"
#include "reduce/reduce.h"

namespace prioccl::detail {

bool Engine::tryInline(const std::shared_ptr<OpState>& op) {
  if (op->kind != OpState::Kind::kAllReduce || op->named || op->count == 0 || collectives_)
    return false;
  size_t bytes = op->count * reduce::dtypeSize(op->dtype);
  if (bytes > ChunkRunner::kCarryMaxBytes) return false;  // (before the locks: most end here)
  // A held lock means a busy engine (or one stuck in a transport call): the lanes take the op.
  std::unique_lock<std::timed_mutex> progress(progress_, std::try_to_lock);
  if (!progress.owns_lock()) return false;
  // The timeline's spans come from the lanes' bookkeeping: with a timeline, every op takes them.
  if (handover_.failed() || stats_.timelineEnabled() || !idle()) return false;
  // The choice the lanes would make (takeSubmissions keeps it if this op goes there after all).
  if (op->algorithm == priocclAlgoAuto) op->algorithm = selector_.choose(bytes);
  if (!ChunkRunner::carries(*op)) return false;
  try {
    watchdog();  // the inline op's rounds are light ones, which skip it
  } catch (const Error& e) {
    failAll(e.code(), e.what());
    return false;  // submit() fails the op with the communicator
  }
  if (!handover_.admitInline(op)) return false;
  stats_.opSubmitted();
  op->inlined = true;
  log(LogLevel::kTrace, "rank ", rank_, ": unnamed op #", matcher_.nextUnnamed(), " inline");
  Announce a = matcher_.number(*op);
  // A round, as the watch on stuck transport calls sees them (its first sends are posted here).
  RoundWatch::Round round(rounds_);
  try {
    runner_.runInline(op, a);  // from here on a failure (failWith) fails the op too
  } catch (const Error& e) {
    failAll(e.code(), e.what());
  } catch (const std::exception& e) {
    failAll(priocclInternalError, e.what());
  }
  return true;
}

}  // namespace prioccl::detail
