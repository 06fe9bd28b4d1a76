// The engine: one progress thread per communicator owns the transport and every chunk.
//
// User threads enqueue ops (submit) and wait on their OpState. The progress thread negotiates
// each op's identity with the other ranks (op_matcher.h, negotiator.h), hands matched ops to the
// chunk runner (chunk_runner.h: lanes, step machines, the send scheduler), dispatches the
// transport's completions, keeps the peers' liveness and fails the communicator as one. See
// docs/architecture.md and docs/scheduler.md.
//
// A thread blocked in wait() takes over the progress loop for as long as it waits (one thread at
// a time, under progress_), and the progress thread steps aside meanwhile (handover.h). A
// blocking all-reduce then costs no thread hand-offs: on an oversubscribed host each wake-up of
// another thread costs more than a small op's whole exchange. Transport calls stay serialised;
// ops are finished (their callbacks run) outside the lock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "algo/select.h"
#include "coll_backend.h"
#include "common/engine_clock.h"
#include "common/ticker.h"
#include "common/timeline.h"
#include "core/chunk_runner.h"
#include "core/collective_runner.h"
#include "core/control_plane.h"
#include "core/handover.h"
#include "core/op.h"
#include "core/op_matcher.h"
#include "core/op_stats.h"
#include "core/round_watch.h"
#include "core/transfers.h"
#include "core/watchdog.h"
#include "transport.h"

namespace prioccl::detail {

class Engine;

// Outlives the engine, so that a late waiter learns safely that there is no engine to drive.
struct ProgressGate {
  std::mutex mutex;
  std::condition_variable cv;
  Engine* engine = nullptr;  // null once the engine has stopped
  int drivers = 0;           // threads inside Engine::drive
  // Set as the engine stops: its transport stopped for good (Transport::quiesce), so no cancelled
  // transfer still touches a buffer.
  bool transportQuiesced = false;
};

class Engine;
// Runs f on the gate's engine unless it has stopped; the engine cannot stop meanwhile.
void withEngine(ProgressGate& gate, const std::function<void(Engine&)>& f);
// Drives the op's engine until the op is done (no-op when the engine is gone).
void driveUntilDone(OpState& op);

class Engine : private ChunkRunner::Events,
               private CollectiveRunner::Events,
               private OpMatcher::Sink,
               private ControlPlane::Host {
 public:
  // `heartbeats`: the engine may call the transport while no op is in flight (not with an
  // application that has MPI only at MPI_THREAD_SERIALIZED); without, no peer is declared lost.
  // `timelineClock`: this rank's clock against rank 0's, for PRIOCCL_TIMELINE's timestamps.
  // `collectives`: a collective backend (coll_backend.h) that runs every collective, in the order
  // the coordinator plans (collective_runner.h); the transport then carries control messages and
  // point-to-point ops only. Null: collectives run as step machines over the transport.
  // `hosts`: which ranks share a host, for the hierarchical all-reduce (null: each its own).
  // `progress`: kCallerSteps starts no thread (nor the watch on stuck transport calls): the
  // caller runs every round (stepOnce), as the simulator (perf/sim) runs many engines on one
  // thread under a simulated clock (common/engine_clock.h).
  enum class Progress : uint8_t { kOwnThread, kCallerSteps };
  Engine(std::unique_ptr<Transport> transport, const Config& config, const AlgoSelector& selector,
         std::shared_ptr<ErrorLog> errorLog, bool heartbeats = true,
         const TimelineClock& timelineClock = {},
         std::unique_ptr<CollBackend> collectives = nullptr,
         std::shared_ptr<const HostLayout> hosts = nullptr,
         Progress progress = Progress::kOwnThread);
  ~Engine() override;  // drains, then stops the progress thread
  // The progress thread, for placing it on CPUs (topology/placement.h).
  std::thread::native_handle_type progressThread() { return thread_.native_handle(); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. The engine owns the op from here on. `callerWaits`: the caller is about to
  // drive progress in wait(), so the progress thread need not be woken (and a small unnamed op
  // on an idle engine may run inline: engine_inline.cpp).
  void submit(std::shared_ptr<OpState> op, bool callerWaits = false);
  // Runs the progress loop on the calling thread until `op` is done. Through driveUntilDone only.
  void drive(OpState& op);
  // Progress::kCallerSteps: one full round of progress on the calling thread (ops it ends are
  // finished on return). True when anything moved; *idle: nothing is in flight.
  bool stepOnce(bool* idle) { return progressOnce(idle); }
  const std::shared_ptr<ProgressGate>& gate() const { return gate_; }
  // Finishes every submitted op, then joins the progress thread and says goodbye to the peers.
  // Idempotent. False: a transport call has not returned for PRIOCCL_TIMEOUT_S (the communicator
  // has failed with priocclTimeout), so the progress thread cannot stop; the caller must leak the
  // engine, whose destructor would wait for that call.
  bool drainAndStop();
  // Any thread: fails every pending and later op now and tells the other ranks.
  void abort();
  // Any thread: the progress thread looks again soon (a staged op's input arrived).
  void poke() { handover_.poke(); }
  priocclCounters_t counters() const { return stats_.snapshot(); }
  // The communicator's failure as later ops get it (priocclSuccess while healthy): lost peers and
  // peers' aborts show here without an op in flight, through the progress thread's watchdog.
  priocclResult_t asyncError() const {
    return handover_.failed() ? handover_.failCode() : priocclSuccess;
  }
  // After the communicator's own ops at creation: counters restart from zero and unnamed ops
  // are numbered from here in messages.
  void startApplication();
  // The lane and chunk identity a data tag belongs to (for tests that watch the wire).
  // Point-to-point tags: 0 <= tag < this.
  int pointToPointTags() const { return runner_.lanes().pointToPointTags(); }
  uint64_t chunkOfTag(uint64_t tag, int* lane) const {
    return runner_.lanes().chunkOfTag(tag, lane);
  }
  // The send credit's highest value so far (the simulator reports it).
  size_t highestSendCredit() const { return runner_.highestCredit(); }
  // Starts a timeline into `path` at run time (replacing an open one) or stops it; see
  // OpStats::startTimeline. Returns the file's path, "" when it cannot be written.
  std::string startTimeline(const std::string& path);
  void stopTimeline();
  // Replaces the cost model. Only before any op that leaves the algorithm to the model.
  void setSelector(const AlgoSelector& selector) {
    std::lock_guard<std::timed_mutex> lock(progress_);
    selector_ = selector;
  }

 private:
  using Clock = EngineClock;
  using Kind = Transfers::Kind;

  void run();  // the progress thread
  // The progress thread's and drivers' spin, as this transport needs it (Transport::pollYields).
  Backoff makeBackoff() const;
  // One locked round of progress, then finishes the ops it ended. `idle`: nothing in flight.
  // `light`: see step().
  // `waiter`: a thread waiting for this op runs the round (null: the progress thread). Should the
  // lock's holder be stuck in a transport call (lockUnlessStuck), no round runs: the communicator
  // fails, and so does the op.
  bool progressOnce(bool* idle, bool light = false, OpState* waiter = nullptr);
  // Takes the progress lock, unless its holder has been inside one round past PRIOCCL_TIMEOUT_S
  // (round_watch.h): then fails the communicator (failStuck) and returns false. Returns false
  // too once `waiter` (if any) is done.
  bool lockUnlessStuck(std::unique_lock<std::timed_mutex>& lock, OpState* waiter);
  // One look by a thread that cannot take the lock (watching with `watch`): true when the holder
  // has been stuck past PRIOCCL_TIMEOUT_S, or was declared stuck already; the communicator and
  // `waiter` have failed then (failStuck).
  bool failedStuck(RoundWatch::Observer& watch, OpState* waiter);
  // Without the progress lock: fails the communicator, its queued ops and `waiter`, naming the
  // call that has not returned. The holder cleans the rest up if the call ever returns
  // (takeOutsideFailure).
  void failStuck(Clock::duration stuckFor, OpState* waiter);
  // The stuck round declared by failStuck is still running.
  bool stillStuck() const {
    return stuck_.load(std::memory_order_acquire) && rounds_.ticket() == stuckTicket_.load();
  }
  // Under the lock: a failure declared outside it (failStuck) cancels the transfers and fails the
  // ops here, before anything the transport returned is used. True when it did.
  bool takeOutsideFailure();
  bool step(bool light);
  bool idle() const;
  bool takeSubmissions();
  bool schedule();  // control messages, then the runner's activation and sends
  bool exchangeControl();
  bool pollTransport();
  void onCompletion(const Completion& c, Clock::time_point now);
  // The inline path (engine_inline.cpp): a blocking unnamed op small enough for its agreement to
  // reduce it, submitted while the engine is idle, runs its agreement chunk outside the lanes and
  // the scheduler. Same identity, tags and messages as on the lanes, so ranks that take either
  // path interoperate; only the bookkeeping a lone op does not need is skipped.
  bool tryInline(const std::shared_ptr<OpState>& op);
  // ChunkRunner::Events and OpMatcher::Sink: the matcher routes ops into the runner's lanes.
  void agreementDone(const AgreementChunk& agreement, std::shared_ptr<OpState> op) override {
    matcher_.concluded(agreement, std::move(op), *this);
  }
  void opEnded(OpState& op) override { endOp(op, priocclSuccess, ""); }
  void join(uint32_t lane, std::shared_ptr<OpState> op) override {
    // Decided by the coordinator; the backend runs the kinds it has (v-variants: step machines).
    if (collectives_ && lane == kNamedLane && CollectiveRunner::runs(op->kind))
      collectives_->add(std::move(op));
    else
      runner_.add(lane, std::move(op));
  }
  void matched(const OpState& op) override { stats_.matched(op, Clock::now()); }
  // The engine is done with `op` (OpState::ended; OpMatcher::Sink): counted, and its result
  // published (OpState::finish) once the progress lock is released.
  void endOp(OpState& op, priocclResult_t code, const std::string& message) override;
  // The algorithm of a collective, settled once from arguments every rank agrees on.
  void settleAlgorithm(OpState& op) const;
  // While this rank has joined: an op the coordinator answered for it (d.filled) runs as a
  // stand-in (stand_in.h). False when `d` is not such an op.
  bool answerForJoined(const Decision& d);

  // Fails the communicator: every pending and later op gets `code`. Unless the failure came from
  // a peer's abort, the control peers are told (the coordinator relays a peer's to the others).
  void failAll(priocclResult_t code, const std::string& message);
  void failFromPeer(int from, const AbortNotice& notice);
  void failWith(priocclResult_t code, const std::string& full, const AbortNotice* tell,
                int skipPeer);
  // ControlPlane::Host: the control plane polls through the engine while its messages leave.
  void dispatch(const Completion& c) override { onCompletion(c, Clock::now()); }
  bool pollOnce() override;
  bool failed() const override { return handover_.failed(); }
  void fail(const Error& e) override { failAll(e.code(), e.what()); }

  // Heartbeats, then the watchdog's checks; cheap, rate-limited.
  void watchdog();

  std::unique_ptr<Transport> transport_;
  const Config config_;
  AlgoSelector selector_;  // set before the first op that does not force its algorithm
  std::shared_ptr<ErrorLog> errorLog_;
  const int rank_;
  std::shared_ptr<ProgressGate> gate_ = std::make_shared<ProgressGate>();
  Handover handover_;  // shared with user threads: submissions, drivers, naps, the failure

  // Held for every round of progress; guards everything below. Timed: waiters give up on a
  // holder stuck in a transport call (lockUnlessStuck).
  std::timed_mutex progress_;
  RoundWatch rounds_;                     // the holder's rounds, for waiters (not guarded)
  std::atomic<bool> stuck_{false};        // failStuck ran
  std::atomic<uint64_t> stuckTicket_{0};  // the round it found stuck
  bool failureHandled_ = false;           // failWith ran (a failStuck's failure may not have)
  // The progress thread has returned (drainAndStop waits for it without joining a stuck one).
  std::mutex exitMutex_;
  std::condition_variable exitCv_;
  bool exited_ = false;
  struct Ended {
    std::shared_ptr<OpState> op;
    priocclResult_t code = priocclSuccess;
    std::string message;
  };
  std::vector<Ended> ended_;                     // to finish once the lock is released
  std::vector<std::shared_ptr<OpState>> taken_;  // takeSubmissions' batch
  std::vector<Completion> completions_;          // pollTransport's batch
  OpMatcher matcher_;     // op identities across ranks, and when each joins its lane
  OpStats stats_;         // counters (any thread) and the timeline
  Transfers transfers_;   // the cookie table and the control channel (after stats_)
  ControlPlane control_;  // negotiation, heartbeats, goodbyes, abort notices (after transfers_)
  ChunkRunner runner_;    // lanes, chunks, the send scheduler (after transfers_)
  std::unique_ptr<CollBackend> collBackend_;       // null: no collective backend
  std::unique_ptr<CollectiveRunner> collectives_;  // over collBackend_
  std::shared_ptr<OpState> join_;  // this rank's join (priocclJoin) until every rank has joined
  Watchdog watchdog_;              // lost peers, stalls, timeouts (after runner_)
  std::thread thread_;
  std::unique_ptr<Ticker> stuckWatch_;  // null: PRIOCCL_TIMEOUT_S=0 (after thread_)
};

}  // namespace prioccl::detail
