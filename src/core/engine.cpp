// The progress loop, op intake, completion dispatch and failure. The data path is chunk_runner.*;
// the hand-over between threads is handover.*.
#include "core/engine.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "common/log.h"
#include "core/stand_in.h"
#include "reduce/reduce.h"

namespace prioccl::detail {
namespace {

// A waiter's rounds that find nothing completed skip the scheduler pass (see Engine::step); every
// this many rounds, and after every submission, a full round runs the watchdog and the stall
// escape.
constexpr unsigned kFullRoundEvery = 16;

// Waits up to `d` for the progress lock. Timed on the system clock: std::timed_mutex's steady
// clock wait is pthread_mutex_clocklock, which ThreadSanitizer (GCC 12's) does not see taking the
// lock, and reports every access under it as a race; pthread_mutex_timedlock it sees. A step of
// the system clock only lengthens or shortens this one wait.
bool lockWithin(std::unique_lock<std::timed_mutex>& lock, std::chrono::microseconds d) {
  return lock.try_lock_until(std::chrono::system_clock::now() + d);
}

}  // namespace

Engine::Engine(std::unique_ptr<Transport> transport, const Config& config,
               const AlgoSelector& selector, std::shared_ptr<ErrorLog> errorLog, bool heartbeats,
               const TimelineClock& timelineClock, std::unique_ptr<CollBackend> collectives,
               std::shared_ptr<const HostLayout> hosts, Progress progressBy)
    : transport_(std::move(transport)),
      config_(config),
      selector_(selector),
      errorLog_(std::move(errorLog)),
      rank_(transport_->rank()),
      handover_(transport_->eventFd(),
                [this] {
                  // One transport call at a time; no sleep behind a holder that is slow to leave
                  // (or stuck in a transport call: lockUnlessStuck).
                  std::unique_lock<std::timed_mutex> progress(progress_, std::defer_lock);
                  if (!lockWithin(progress, std::chrono::milliseconds(1))) return false;
                  return transport_->armEvents();
                }),
      stats_(config.timelinePath, rank_, transport_->size(), timelineClock),
      // The top tag is the control channel's; the lanes share the rest.
      transfers_(*transport_, transport_->tagSpace() - 1,
                 Negotiator::controlPeers(rank_, transport_->size()), kControlBytes,
                 stats_.timelineEnabled()),
      control_(*transport_, transfers_, rank_, transport_->size(),
               heartbeats ? config.timeoutSeconds : 0, config.cacheCapacity, *this),
      runner_(config, rank_, transport_->size(), transport_->tagSpace() - 1, transfers_, stats_,
              *this, std::move(hosts)),
      collBackend_(std::move(collectives)),
      watchdog_(config, rank_, control_.liveness(), control_.negotiator(), matcher_, runner_) {
  if (collBackend_) {
    CollectiveRunner::Events& events = *this;  // a private base: converted here, not in make_unique
    collectives_ = std::make_unique<CollectiveRunner>(
        *collBackend_, config, rank_ == Negotiator::kCoordinator, stats_, events);
    matcher_.coordinateAll();  // launches need one global order: unnamed ops are decided too
    watchdog_.watch(collectives_.get());
  }
  transfers_.postControlReceives();
  gate_->engine = this;
  if (progressBy == Progress::kCallerSteps) return;
  thread_ = std::thread([this] {
    // Named for top -H, perf and gdb: a training process has a dozen threads.
    pthread_setname_np(pthread_self(), "prioccl-prog");
    run();
    std::lock_guard<std::mutex> lock(exitMutex_);
    exited_ = true;
    exitCv_.notify_all();
  });
  // Nobody may be waiting when a round sticks in a transport call: the user polls its requests
  // or computes meanwhile, and the progress thread is the one stuck. A watch of its own fails the
  // communicator then (failStuck), whichever thread holds the round; it sleeps between looks.
  if (config_.timeoutSeconds > 0) {
    auto period = std::chrono::milliseconds(
        std::clamp<long>(std::lround(config_.timeoutSeconds * 1000 / 8), 20, 1000));
    stuckWatch_ = std::make_unique<Ticker>(
        period,
        [this, watch = RoundWatch::Observer()]() mutable {
          return !stuck_.load(std::memory_order_acquire) && !failedStuck(watch, nullptr);
        },
        "prioccl-watch");
  }
}

Engine::~Engine() {
  stuckWatch_.reset();  // drainAndStop watches the rounds itself
  if (!drainAndStop()) {
    // The caller did not leak the engine (as CommImpl::destroy does): wait for the call.
    log(LogLevel::kWarn, "rank ", rank_,
        ": the engine waits for a transport call that has not returned to stop its progress "
        "thread");
    thread_.join();
  }
  {
    // Every op is done; wait for the drivers still on their way out of drive().
    std::unique_lock<std::mutex> lock(gate_->mutex);
    gate_->engine = nullptr;
    gate_->cv.wait(lock, [&] { return gate_->drivers == 0; });
  }
  std::lock_guard<std::timed_mutex> progress(progress_);
  // What the negotiation cost this rank, once (here: drainAndStop may have run twice).
  const Negotiator::Traffic& t = control_.negotiator().traffic();
  if (t.announcedFull + t.announcedCached + t.decidedFull + t.decidedCached > 0)
    log(LogLevel::kInfo, "rank ", rank_, ": negotiation: ", t.announcedFull, " announced in full, ",
        t.announcedCached, " by response-cache slot; ", t.decidedFull, " decided in full, ",
        t.decidedCached, " by slot; ", t.bytesIn, " bytes in, ", t.bytesOut, " out (",
        control_.negotiator().cachedSignatures(), " signatures cached)");
  // Chunk scratch that cancelled transfers may still be writing into is freed only once the
  // transport has stopped for good.
  const bool quiesced = transport_->quiesce();
  runner_.endTraffic(quiesced);
  transfers_.endTraffic(quiesced);
  std::lock_guard<std::mutex> lock(gate_->mutex);
  gate_->transportQuiesced = quiesced;
}

void withEngine(ProgressGate& gate, const std::function<void(Engine&)>& f) {
  Engine* engine;
  {
    std::lock_guard<std::mutex> lock(gate.mutex);
    if (!(engine = gate.engine)) return;
    ++gate.drivers;  // the engine's destructor waits for it
  }
  f(*engine);
  {
    std::lock_guard<std::mutex> lock(gate.mutex);
    --gate.drivers;
  }
  gate.cv.notify_all();
}

void driveUntilDone(OpState& op) {
  if (!op.gate || op.done.load(std::memory_order_acquire)) return;
  withEngine(*op.gate, [&](Engine& engine) { engine.drive(op); });
}

void Engine::submit(std::shared_ptr<OpState> op, bool callerWaits) {
  op->submitted = op->lastProgress = Clock::now();
  // Set already where the op waited for its stream (api/stream_gate.h): its waiter may read it.
  if (!op->gate) op->gate = gate_;
  if (callerWaits && tryInline(op)) return;
  stats_.opSubmitted();
  if (handover_.push(op, callerWaits)) return;  // throws once the communicator is being destroyed
  // A failed communicator fails every later op at once.
  stats_.opEnded(false);
  op->finish(handover_.failCode(), handover_.failMessage());
}

bool Engine::drainAndStop() {
  handover_.stop();
  if (thread_.joinable()) {
    // Joined only once it has returned: a thread stuck in a transport call (its own or a
    // waiter's, whose lock it waits for) never would.
    RoundWatch::Observer watch;
    std::unique_lock<std::mutex> lock(exitMutex_);
    while (!exitCv_.wait_for(lock, Watchdog::kPeriod, [&] { return exited_; }))
      if (failedStuck(watch, nullptr)) return false;
    lock.unlock();
    thread_.join();
  }
  // Every op is done: say goodbye, and wait for the peers'.
  std::lock_guard<std::timed_mutex> progress(progress_);
  if (control_.liveness().enabled() && !handover_.failed()) control_.goodbye();
  return true;
}

bool Engine::pollOnce() {
  try {
    return pollTransport();
  } catch (const Error& e) {
    failAll(e.code(), e.what());
  }
  return false;
}

void Engine::abort() {
  std::vector<Ended> ended;
  {
    std::unique_lock<std::timed_mutex> progress(progress_, std::defer_lock);
    if (!lockUnlessStuck(progress, nullptr)) {  // failed by failStuck instead
      handover_.wakeAll();
      return;
    }
    takeOutsideFailure();
    if (!handover_.failed())
      failAll(priocclInvalidUsage,
              "the communicator was aborted on this rank (priocclCommAbort / Communicator::abort)");
    ended.swap(ended_);
  }
  for (Ended& e : ended) e.op->finish(e.code, e.message);
  handover_.wakeAll();
}

void Engine::startApplication() {
  {
    std::lock_guard<std::timed_mutex> lock(progress_);
    matcher_.startApplication();
  }
  stats_.reset();
}

std::string Engine::startTimeline(const std::string& path) {
  std::lock_guard<std::timed_mutex> lock(progress_);  // the timeline is written under it
  std::string file = stats_.startTimeline(path);
  transfers_.stampStarts(!file.empty());
  return file;
}

void Engine::stopTimeline() {
  std::lock_guard<std::timed_mutex> lock(progress_);
  stats_.stopTimeline();
  transfers_.stampStarts(false);
}

// Idle: nothing to do but wait for submissions (the standing control receives do not count).
// Not while a lost endpoint's failure waits for the peer's reason: that wait must end in time.
bool Engine::idle() const {
  return runner_.empty() && matcher_.empty() && (!collectives_ || collectives_->empty()) &&
         transport_->pending() == transfers_.controlPeers().size() &&
         !control_.liveness().awaitingCause();
}

// One round of progress; a transport failure fails the communicator rather than the process.
// A light round only polls the transport, and passes on to the scheduler only when something
// completed: without a completion or a submission, nothing it would do can have changed but the
// clock (heartbeats, timeouts, the stall escape), which full rounds keep up with; so a waiter's
// rounds stay short (issue 19).
bool Engine::step(bool light) {
  try {
    if (handover_.failed()) {  // nothing moves any more, but its abort notices must go out
      takeOutsideFailure();
      control_.pollFailed();
      return false;
    }
    bool submitted = false;
    if (!light) {
      watchdog();
      // New ops post their receives and first sends before the transport is polled: a poll that
      // finds nothing may give the core away (Open MPI yields then when ranks share cores), and
      // the op's first message would wait for this rank's next turn (issue 19).
      submitted = takeSubmissions();
      if (submitted) schedule();
      if (handover_.failed()) return true;
    }
    runner_.resetNews();
    bool polled = pollTransport();
    if (light && !polled) return false;
    bool moved = submitted || polled;
    // After a submission the pass above has seen everything but what the poll brought; the
    // inline op's completions bring it nothing.
    if (runner_.news() || (!light && !submitted)) moved |= schedule();
    runner_.retire();
    return moved;
  } catch (const Error& e) {
    failAll(e.code(), e.what());
  } catch (const std::exception& e) {
    failAll(priocclInternalError, e.what());
  }
  return true;
}

bool Engine::progressOnce(bool* idleNow, bool light, OpState* waiter) {
  bool moved;
  // Ops are finished outside the lock. A round ends a few at most: those move out, and ended_
  // keeps its capacity (swapping it out cost a small op an allocation: issue 19).
  constexpr size_t kFew = 4;
  Ended few[kFew];
  size_t nFew = 0;
  std::vector<Ended> many;
  {
    // Not behind a holder stuck in a transport call: a waiter's op fails then (and is done); the
    // progress thread rests, the communicator failed.
    std::unique_lock<std::timed_mutex> lock(progress_, std::defer_lock);
    if (!lockUnlessStuck(lock, waiter)) return waiter != nullptr;
    RoundWatch::Round round(rounds_);
    moved = step(light && !handover_.hasIncoming());
    if (ended_.size() > kFew) {
      many.swap(ended_);
    } else {
      for (Ended& e : ended_) few[nFew++] = std::move(e);
      ended_.clear();
    }
    *idleNow = idle();
    if (*idleNow) stats_.flushTimeline();
  }
  for (size_t i = 0; i < nFew; ++i) few[i].op->finish(few[i].code, few[i].message);
  for (Ended& e : many) e.op->finish(e.code, e.message);
  bool anyEnded = nFew > 0 || !many.empty();
  if (anyEnded) handover_.opsEnded();
  return moved || anyEnded;
}

Backoff Engine::makeBackoff() const {
  return Backoff(config_.slowLinks, transport_->pollYields() ? 64 : 1);
}

void Engine::run() {
  Backoff backoff = makeBackoff();
  unsigned rounds = 0;
  const Liveness& liveness = control_.liveness();
  Clock::duration heartbeat = liveness.enabled() ? liveness.period() : Clock::duration::zero();
  for (;;) {
    bool idleNow = false;
    if (progressOnce(&idleNow, ++rounds % kFullRoundEvery != 1)) {
      backoff.reset();
      continue;
    }
    bool fullRound = false;
    if (!handover_.rest(idleNow, heartbeat, backoff, &fullRound)) return;
    if (fullRound) rounds = 0;
    if (idleNow) backoff.start();  // what comes next is a new wait
  }
}

void Engine::drive(OpState& op) {
  handover_.driverEnters();
  Backoff backoff = makeBackoff();
  // An inline op has nothing for a full round to take (its submission posted it and ran the
  // watchdog): its rounds start light.
  unsigned rounds = op.inlined ? 1 : 0;
  bool idleNow = false;
  while (!op.done.load(std::memory_order_acquire)) {
    if (progressOnce(&idleNow, ++rounds % kFullRoundEvery != 1, &op)) {
      backoff.reset();
      continue;
    }
    backoff.pause([&](std::chrono::microseconds us) {
      rounds = 0;  // after a nap, a full round
      handover_.driverNap(op, us);
    });
  }
  // The progress thread takes over whatever is still in flight.
  handover_.driverLeaves(idleNow);
}

void Engine::watchdog() {
  Clock::time_point now = Clock::now();
  if (!watchdog_.due(now)) return;
  control_.heartbeat(now);
  watchdog_.check(now);
}

bool Engine::takeSubmissions() {
  std::vector<std::shared_ptr<OpState>>& fresh = taken_;  // its capacity goes back and forth
  if (!handover_.take(fresh)) return false;
  struct Clear {  // whatever happens below, no op stays behind in taken_
    std::vector<std::shared_ptr<OpState>>& v;
    ~Clear() { v.clear(); }
  } clear{fresh};
  for (auto& op : fresh) {
    if (join_ && !op->pointToPoint()) {  // it takes part in the others' ops, not its own
      endOp(*op, priocclInvalidUsage,
            concat(kindName(op->kind), " ", describeOp(*op, matcher_.nextUnnamed()),
                   " submitted on rank ", rank_,
                   " after its join (priocclJoin): a joined rank submits no collective until "
                   "every rank has joined"));
      continue;
    }
    if (op->kind == OpState::Kind::kJoin) join_ = op;
    settleAlgorithm(*op);
    matcher_.admit(std::move(op), control_.negotiator(), *this);
  }
  return true;
}

// From arguments every rank agrees on (and a table every rank holds alike); a mismatched op fails
// before its algorithm matters.
void Engine::settleAlgorithm(OpState& op) const {
  if (op.kind == OpState::Kind::kAllReduce && op.algorithm == priocclAlgoAuto)
    op.algorithm = selector_.choose(op.count * reduce::dtypeSize(op.dtype));
}

bool Engine::answerForJoined(const Decision& d) {
  if (d.filled == 0 || !join_ || matcher_.awaits(d)) return false;
  std::shared_ptr<OpState> standIn;
  if (d.ok) {  // a failed op has nothing to run: the ranks that submitted it report it
    standIn = makeStandIn(d, rank_, transport_->size());
    standIn->submitted = standIn->lastProgress = Clock::now();
    standIn->gate = gate_;
    standIn->errorLog = errorLog_;
    settleAlgorithm(*standIn);
    stats_.opSubmitted();
  }
  matcher_.adopt(d, standIn);
  return true;
}

bool Engine::schedule() {
  bool moved = exchangeControl();
  moved |= runner_.activate();
  moved |= runner_.postSends();
  return moved;
}

// Sends what the negotiator has to say and turns its decisions into live ops, in global order.
bool Engine::exchangeControl() {
  bool any = control_.sendNegotiation();
  for (const Decision& d : control_.negotiator().takeDecisions()) {
    if (!answerForJoined(d) || d.ok) matcher_.apply(d, *this);
    any = true;
  }
  if (join_ && join_->ended) join_.reset();  // every rank joined
  if (collectives_) {
    // The launch order: planned here on the coordinator (and sent), followed elsewhere.
    Negotiator& n = control_.negotiator();
    if (rank_ == Negotiator::kCoordinator) {
      std::vector<LaunchEntry> planned = collectives_->plan();
      if (!planned.empty()) {
        n.broadcastLaunches(planned);
        any |= control_.sendNegotiation();
      }
    } else {
      std::vector<LaunchEntry> arrived = n.takeLaunches();
      if (!arrived.empty()) collectives_->follow(arrived);
    }
    any |= collectives_->launch();
  }
  return any;
}

bool Engine::pollTransport() {
  bool launches = false;
  if (collectives_) {
    rounds_.call("the collective backend's poll");
    launches = collectives_->poll(Clock::now());
    rounds_.call(nullptr);
    if (takeOutsideFailure()) return true;
    if (launches) runner_.noteNews();  // the next pass plans and launches more
  }
  if (transport_->pending() == 0) return launches;
  completions_.clear();
  rounds_.call(transport_->pollCall());
  transport_->poll(completions_);
  rounds_.call(nullptr);
  // Declared stuck meanwhile (failStuck): nothing it returned is used.
  if (takeOutsideFailure()) return true;
  if (completions_.empty()) return launches;
  Clock::time_point now = Clock::now();  // one clock read for the whole batch
  for (const Completion& c : completions_) {
    onCompletion(c, now);
    if (handover_.failed()) break;
  }
  return true;
}

void Engine::onCompletion(const Completion& c, Clock::time_point done) {
  const Transfers::Posted p = transfers_.at(c.cookie);
  if (!c.ok && !control_.failureIsBenign(p)) {
    // The peer's endpoint went away: if the peer failed the communicator itself, the
    // coordinator's relay of its reason may still be on its way, and must win over this echo of
    // its teardown. The watchdog fails the communicator with this error if no reason comes in
    // time. The transfer's record stays: its op waits, and the failure clears it.
    if (c.peerLost && control_.holdForReason(p.peer, c, done)) return;
    failAll(c.code, c.error);
    return;
  }
  transfers_.release(c.cookie);
  if (p.kind == Kind::kDataRecv || p.kind == Kind::kDataSend) {
    if (p.kind == Kind::kDataRecv) control_.heard(p.peer, done);
    runner_.onData(p, c.bytes, done);
    return;
  }
  runner_.noteNews();
  int from = -1;
  AbortNotice notice;
  if (control_.onCompletion(p, c, done, &from, &notice)) failFromPeer(from, notice);
}

void Engine::endOp(OpState& op, priocclResult_t code, const std::string& message) {
  stats_.opEnded(code == priocclSuccess);
  op.ended = true;
  ended_.push_back({op.shared_from_this(), code, message});
}

void Engine::failAll(priocclResult_t code, const std::string& message) {
  AbortNotice notice{rank_, static_cast<int32_t>(code), message};
  failWith(code, concat("rank ", rank_, ": ", message), &notice, -1);
}

// A peer's communicator failed: so does this one. The coordinator passes the news on to the
// ranks that hear only from it.
void Engine::failFromPeer(int from, const AbortNotice& notice) {
  std::string full =
      concat("rank ", rank_, ": rank ", notice.origin, " failed the communicator: ", notice.text);
  bool relay = rank_ == Negotiator::kCoordinator;
  failWith(priocclRemoteError, full, relay ? &notice : nullptr, from);
}

void Engine::failWith(priocclResult_t code, const std::string& full, const AbortNotice* tell,
                      int skipPeer) {
  if (!stuck_.load(std::memory_order_acquire) || failureHandled_) {  // failStuck said it already
    log(LogLevel::kWarn, full);
    errorLog_->set(full);
  }
  failureHandled_ = true;
  std::vector<std::shared_ptr<OpState>> doomed;
  handover_.setFailed(code, full, doomed);
  // Withdrawn before the notices go: a receive that matched while this rank waits for their
  // delivery would pull a peer's data after that peer has failed too, and maybe freed it.
  transport_->cancelAll();
  transfers_.clear();
  // The control receives stand again, to take the peers' messages unread: a peer that failed
  // too waits for this rank to take its abort notice (ControlPlane::tellAbort).
  transfers_.postControlReceives();
  if (tell) control_.tellAbort(*tell, skipPeer);
  runner_.clear(doomed);
  if (collectives_) {
    collBackend_->abandon();
    collectives_->clear(doomed);
  }
  matcher_.clear(doomed);
  join_.reset();
  for (auto& op : doomed)
    if (op && !op->ended) endOp(*op, code, full);
}

bool Engine::lockUnlessStuck(std::unique_lock<std::timed_mutex>& lock, OpState* waiter) {
  if (lock.try_lock()) return true;
  RoundWatch::Observer watch;
  while (!lockWithin(lock, Watchdog::kPeriod)) {
    if (waiter && waiter->done.load(std::memory_order_acquire)) return false;
    if (failedStuck(watch, waiter)) return false;
  }
  return true;
}

bool Engine::failedStuck(RoundWatch::Observer& watch, OpState* waiter) {
  if (stillStuck()) {  // declared already (maybe by another thread): `waiter` fails too
    failStuck(Clock::duration::zero(), waiter);
    return true;
  }
  const std::chrono::duration<double> limit(config_.timeoutSeconds);
  Clock::duration d = watch.stuckFor(rounds_, RoundWatch::Clock::now());
  if (limit.count() <= 0 || d < limit) return false;
  failStuck(d, waiter);
  return true;
}

void Engine::failStuck(Clock::duration stuckFor, OpState* waiter) {
  std::vector<std::shared_ptr<OpState>> doomed;
  if (!stuck_.exchange(true, std::memory_order_acq_rel)) {
    stuckTicket_.store(rounds_.ticket());
    const char* call = rounds_.currentCall();
    std::string full =
        concat("rank ", rank_, ": ",
               call ? concat(call, " (", transport_->name(), " transport)")
                    : concat("a round of progress (", transport_->name(), " transport)"),
               " has not returned for ", std::chrono::duration<double>(stuckFor).count(),
               " s (PRIOCCL_TIMEOUT_S=", config_.timeoutSeconds,
               "): the communicator fails without it (a peer that died mid-transfer can leave a "
               "transport spinning); the buffers of its ops may still be written should it return");
    log(LogLevel::kWarn, full);
    errorLog_->set(full);
    handover_.setFailed(priocclTimeout, full, doomed);  // the first failure wins, as ever
  } else {
    handover_.setFailed(priocclTimeout, "", doomed);  // keeps the first; takes what was queued
  }
  handover_.collectLive(doomed);
  // Queued ops never reached the engine; the others did, but the engine's thread cannot finish
  // them now (and finishing twice is harmless: the first result stays).
  for (auto& op : doomed) op->finish(handover_.failCode(), handover_.failMessage());
  if (waiter) waiter->finish(handover_.failCode(), handover_.failMessage());
  handover_.wakeAll();
}

bool Engine::takeOutsideFailure() {
  if (failureHandled_ || !stuck_.load(std::memory_order_acquire)) return false;
  log(LogLevel::kWarn, "rank ", rank_,
      ": the transport call declared stuck returned; its ops' transfers are cancelled now");
  AbortNotice notice{rank_, static_cast<int32_t>(handover_.failCode()), handover_.failMessage()};
  failWith(handover_.failCode(), handover_.failMessage(), &notice, -1);
  return true;
}

}  // namespace prioccl::detail
