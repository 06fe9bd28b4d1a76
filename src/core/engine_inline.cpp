// The inline path: a blocking unnamed all-reduce small enough for its agreement to reduce it
// (Engine::carries), submitted while the engine is idle, runs
// its agreement chunk directly: posted at submission, driven by completions, its sends posted the
// moment they are ready. No lane entry, live-chunk map, ready queue or scheduler pass, none of
// which a lone op needs, and which cost a small op more CPU than its exchange (issue 19,
// docs/benchmarks.md).
//
// Its identity (the agreement lane's next chunk), tags and messages are those the lanes would
// give it, so a rank on this path interoperates with ranks that took the lanes (busy engines,
// async ops). It keeps the unnamed sequence counters, stays visible to the watchdog
// (timeouts, stall warnings, waitingFor), and fails with the communicator (failWith, abort).
// Ops submitted while it is in flight take the lanes as usual; the unnamed data lane takes them
// in sequence once the inline op has concluded (orderUnnamed).
#include <chrono>

#include "common/log.h"
#include "core/engine.h"
#include "reduce/reduce.h"

namespace prioccl::detail {

bool Engine::tryInline(const std::shared_ptr<OpState>& op) {
  if (op->kind != OpState::Kind::kAllReduce || op->named || op->count == 0) return false;
  size_t bytes = op->count * reduce::dtypeSize(op->dtype);
  if (bytes > kCarryMaxBytes) return false;  // (before the locks: most large ops end here)
  std::lock_guard<std::mutex> progress(progress_);
  // The timeline's spans come from the lanes' bookkeeping: with a timeline, every op takes them.
  if (failed_ || inline_.op || timeline_.enabled() || !idle()) return false;
  // The choice the lanes would make (takeSubmissions keeps it if this op goes there after all).
  if (op->algorithm == priocclAlgoAuto) op->algorithm = selector_.choose(bytes);
  if (!carries(*op)) return false;
  try {
    watchdog();  // the inline op's rounds are light ones, which skip it
  } catch (const Error& e) {
    failAll(e.code(), e.what());
    return false;  // submit() fails the op with the communicator
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Ops queued by other threads come first: they were submitted before this one.
    if (stopping_ || failed_ || !incoming_.empty()) return false;
    counters_.opsSubmitted.fetch_add(1, std::memory_order_relaxed);
  }
  op->inlined = true;
  log(LogLevel::kTrace, "rank ", rank_, ": unnamed op #", matcher_.nextUnnamed(), " inline");
  Announce a = matcher_.number(*op);
  inline_.gid = lanes_.reserve(kAgreeLane);
  inline_.op = op;  // from here on a failure (failWith) fails it too
  try {
    inline_.chunk.emplace(chunkSpec(*op, 0, op->count), agreeScratch_, a, true, kCarryMaxBytes,
                          op->algorithm == priocclAlgoHalvingDoubling);
    pumpInline();
  } catch (const Error& e) {
    failAll(e.code(), e.what());
  } catch (const std::exception& e) {
    failAll(priocclInternalError, e.what());
  }
  return true;
}

void Engine::pumpInline() {
  AgreementChunk& chunk = *inline_.chunk;
  while (chunk.recvReady()) postTransfer(kAgreeLane, inline_.gid, chunk.takeRecv(), true);
  // Its sends bypass the credit, so they need not complete end to end (transport.h).
  while (chunk.sendReady())
    postTransfer(kAgreeLane, inline_.gid, chunk.takeSend(), false, SendCompletion::kBuffered);
  if (!chunk.finished()) return;
  std::shared_ptr<OpState> op = std::move(inline_.op);  // isInline() is false from here on
  counters_.chunksCompleted.fetch_add(1, std::memory_order_relaxed);
  concludeAgreement(chunk, std::move(op));
  inline_.chunk.reset();
}

}  // namespace prioccl::detail
