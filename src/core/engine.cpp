// Progress loop, chunk activation and the priority/credit send scheduler's use of the wire.
// Why this cannot deadlock: lane_table.h (the activation window) and scheduler.h (the stall rule).
#include "core/engine.h"

#include <algorithm>
#include <chrono>

#include "algo/agreement.h"
#include "algo/point_to_point.h"
#include "algo/registry.h"
#include "common/log.h"
#include "reduce/reduce.h"

namespace prioccl::detail {
namespace {

constexpr size_t kMinChunksPerOp = 4, kMinChunkBytes = 64 << 10;
// How long a rank polls, yielding now and then, before it naps while peers are behind. Measured
// on 4 ranks sharing 2 cores (priority_perf, median of 20 runs; 10 for 0.5 ms): the urgent op's
// slowdown is 2.95 with 8 ms, 3.9 with 2 ms, 4.1 with 0.5 ms; small-op latency is the same for all
// three.
constexpr std::chrono::milliseconds kSpinTime(8);
// A waiter's rounds that find nothing completed skip the scheduler pass (see Engine::step); every
// this many rounds, and after every submission, a full round runs the watchdog and the stall
// escape.
constexpr unsigned kFullRoundEvery = 16;
constexpr unsigned kMaxSleepUs = 256;  // longest nap between polls while ops are in flight
// Longest sleep on the transport's descriptor: the stall escape and timeouts need a poll now
// and then even when nothing arrives.
constexpr std::chrono::microseconds kEventSleep(1000);
// How long a failing rank tries to get its abort notice out before tearing its receives down.
constexpr std::chrono::milliseconds kAbortFlush(200);
// Longest wait at destroy for the peers' goodbyes (they destroy theirs at about the same time).
constexpr std::chrono::seconds kGoodbyeWait(30);

// The op's track in the timeline, the same on every rank. Unnamed ops, named ops and point to
// point ops number themselves separately (globalSeq), so each kind gets its own range of
// track ids: small numbers, exact as JSON doubles, read as "op N" in the viewers.
// The most step ids a chunk of any algorithm uses: the tag layout reserves bits for them.
uint64_t maxSteps(int nranks) {
  int most = 1;
  for (const AlgoEntry& e : algoRegistry()) most = std::max(most, e.steps(nranks));
  return static_cast<uint64_t>(most);
}

// The scratch of the largest chunk of any algorithm: one pool serves them all.
size_t maxScratchBytes(size_t chunkBytes, int nranks) {
  size_t most = 0;
  for (const AlgoEntry& e : algoRegistry())
    most = std::max(most, e.scratchBytes(chunkBytes, nranks));
  return most;
}

uint64_t timelineTrack(const OpState& op) {
  if (op.globalSeq >= kPointToPointSeqBase)
    return 2'000'000'000 + (op.globalSeq - kPointToPointSeqBase);
  return op.named ? 1'000'000'000 + op.globalSeq : op.globalSeq;
}

}  // namespace

Engine::Engine(std::unique_ptr<Transport> transport, const Config& config,
               const AlgoSelector& selector, std::shared_ptr<ErrorLog> errorLog, bool heartbeats,
               const TimelineClock& timelineClock)
    : transport_(std::move(transport)),
      config_(config),
      selector_(selector),
      errorLog_(std::move(errorLog)),
      rank_(transport_->rank()),
      nranks_(transport_->size()),
      events_(transport_->eventFd()),
      negotiator_(rank_, nranks_),
      liveness_(nranks_, negotiator_.controlPeers(), heartbeats ? config.timeoutSeconds : 0,
                Clock::now()),
      // The top tag is the control channel's; the lanes share the rest.
      lanes_(transport_->tagSpace() - 1, maxSteps(nranks_), config.windowChunks),
      scheduler_(config.creditBytes),
      scratch_(maxScratchBytes(config.chunkBytes, nranks_)),
      agreeScratch_(AgreementChunk::scratchBytes(kCarryMaxBytes)),
      timeline_(config.timelinePath, rank_, nranks_, timelineClock),
      transfers_(*transport_, transport_->tagSpace() - 1, negotiator_.controlPeers(), kControlBytes,
                 timeline_.enabled()) {
  if (lanes_.windowLimited())
    log(LogLevel::kWarn, "window limited to ", lanes_.window(),
        " chunks by the transport's tag space");
  transfers_.postControlReceives();
  gate_->engine = this;
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  drainAndStop();
  // Every op is done; wait for the drivers still on their way out of drive().
  std::unique_lock<std::mutex> lock(gate_->mutex);
  gate_->engine = nullptr;
  gate_->cv.wait(lock, [&] { return gate_->drivers == 0; });
}

void driveUntilDone(OpState& op) {
  if (!op.gate || op.done.load(std::memory_order_acquire)) return;
  ProgressGate& gate = *op.gate;
  Engine* engine;
  {
    std::lock_guard<std::mutex> lock(gate.mutex);
    if (!(engine = gate.engine)) return;
    ++gate.drivers;
  }
  engine->drive(op);
  {
    std::lock_guard<std::mutex> lock(gate.mutex);
    --gate.drivers;
  }
  gate.cv.notify_all();
}

void Engine::submit(std::shared_ptr<OpState> op, bool callerWaits) {
  op->submitted = op->lastProgress = Clock::now();
  op->gate = gate_;
  if (callerWaits && tryInline(op)) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) fail(priocclInvalidUsage, "communicator is being destroyed");
    counters_.opsSubmitted.fetch_add(1, std::memory_order_relaxed);
    if (!failed_) {
      incoming_.push_back(std::move(op));
      hasIncoming_.store(true, std::memory_order_relaxed);
      if (!callerWaits && drivers_ == 0) wakeProgress();  // a driver takes it itself
      return;
    }
  }
  counters_.opsFailed.fetch_add(1, std::memory_order_relaxed);
  op->finish(failCode_, failMessage_);  // a failed communicator fails every later op at once
}

void Engine::drainAndStop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    wakeProgress();
  }
  if (thread_.joinable()) thread_.join();
  // Every op is done. A goodbye tells the peers that this rank's silence is not death, and is
  // its last message to them. Waiting for theirs makes sure nothing is in flight to this rank
  // when its MPI communicator is freed: Open MPI hands a message for a freed communicator to the
  // next one created with the same context id, where a stale heartbeat would take the sequence
  // slot of a real message.
  std::lock_guard<std::mutex> progress(progress_);
  if (!liveness_.enabled() || failed_ || saidGoodbye_) return;
  saidGoodbye_ = true;
  try {
    sendToPeers(encodeSignal(ControlKind::kGoodbye), -1, std::chrono::milliseconds(200));
  } catch (const Error& e) {
    failAll(e.code(), e.what());
  }
  Clock::time_point start = Clock::now(), deadline = start + kGoodbyeWait;
  unsigned quiet = 0;
  for (;;) {
    bool waiting = false;
    for (int peer : transfers_.controlPeers()) waiting |= !liveness_.hasLeft(peer);
    Clock::time_point now = Clock::now();
    if (!waiting || failed_ || liveness_.lost(now) >= 0) return;
    if (now > deadline) {
      log(LogLevel::kWarn, "rank ", rank_, ": destroying the communicator without the goodbye of ",
          "every peer (", liveness_.report(now, Clock::duration::zero()),
          "): a message still in flight could reach a later communicator");
      transport_->cancelAll();  // the transport abandons its channel rather than reuse it
      return;
    }
    try {
      if (pollTransport()) quiet = 0;
    } catch (const Error& e) {
      failAll(e.code(), e.what());
    }
    if (++quiet > 64) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void Engine::abort() {
  std::vector<Ended> ended;
  {
    std::lock_guard<std::mutex> progress(progress_);
    bool failed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failed = failed_;
    }
    if (!failed)
      failAll(priocclInvalidUsage,
              "the communicator was aborted on this rank (priocclCommAbort / Communicator::abort)");
    ended.swap(ended_);
  }
  for (Ended& e : ended) e.op->finish(e.code, e.message);
  events_.wake();  // sleeping drivers see their ops done
  std::lock_guard<std::mutex> lock(mutex_);
  wakeProgress();
}

priocclCounters_t Engine::counters() const {
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

void Engine::startApplication() {
  {
    std::lock_guard<std::mutex> lock(progress_);
    matcher_.startApplication();
  }
  for (std::atomic<uint64_t>* c :
       {&counters_.opsSubmitted, &counters_.opsCompleted, &counters_.opsFailed,
        &counters_.chunksCompleted, &counters_.sendsPosted, &counters_.bytesSent,
        &counters_.bytesReceived, &counters_.preemptions, &counters_.queueWaitNs})
    c->store(0, std::memory_order_relaxed);
}

// Idle: nothing to do but wait for submissions (the standing control receives do not count).
bool Engine::idle() const {
  if (inline_.op || !lanes_.empty()) return false;
  return matcher_.empty() && transport_->pending() == transfers_.controlPeers().size();
}

// One round of progress; a transport failure fails the communicator rather than the process.
// A light round only polls the transport, and passes on to the scheduler only when something
// completed: without a completion or a submission, nothing it would do can have changed but the
// clock (heartbeats, timeouts, the stall escape), which full rounds keep up with; so a waiter's
// rounds stay short (issue 19).
bool Engine::step(bool light) {
  try {
    if (failed_) return false;  // nothing moves any more (written under progress_ too)
    bool submitted = false;
    if (!light) {
      watchdog();
      // New ops post their receives and first sends before the transport is polled: a poll that
      // finds nothing may give the core away (Open MPI yields then when ranks share cores), and
      // the op's first message would wait for this rank's next turn (issue 19).
      submitted = takeSubmissions();
      if (submitted) schedule();
      if (failed_) return true;
    }
    schedulerNews_ = false;
    bool polled = pollTransport();
    if (light && !polled) return false;
    bool moved = submitted || polled;
    // After a submission the pass above has seen everything but what the poll brought; the
    // inline op's completions bring it nothing.
    if (schedulerNews_ || (!light && !submitted)) moved |= schedule();
    lanes_.retire();
    return moved;
  } catch (const Error& e) {
    failAll(e.code(), e.what());
  } catch (const std::exception& e) {
    failAll(priocclInternalError, e.what());
  }
  return true;
}

bool Engine::progressOnce(bool* idleNow, bool light) {
  bool moved;
  // Ops are finished outside the lock. A round ends a few at most: those move out, and ended_
  // keeps its capacity (swapping it out cost a small op an allocation: issue 19).
  constexpr size_t kFew = 4;
  Ended few[kFew];
  size_t nFew = 0;
  std::vector<Ended> many;
  {
    std::lock_guard<std::mutex> lock(progress_);
    moved = step(light && !hasIncoming_.load(std::memory_order_relaxed));
    if (ended_.size() > kFew) {
      many.swap(ended_);
    } else {
      for (Ended& e : ended_) few[nFew++] = std::move(e);
      ended_.clear();
    }
    *idleNow = idle();
    if (*idleNow) timeline_.flush();
  }
  for (size_t i = 0; i < nFew; ++i) few[i].op->finish(few[i].code, few[i].message);
  for (Ended& e : many) e.op->finish(e.code, e.message);
  bool anyEnded = nFew > 0 || !many.empty();
  if (anyEnded && sleepingDrivers_.load() > 0) events_.wake();
  return moved || anyEnded;
}

// Polls while ops are in flight: yields for kSpinTime, then naps growing to kMaxSleepUs, so that
// oversubscribed ranks get the cores. The spin is timed, not counted: a round's cost differs
// by transport and by round (light or full). A transport with an event descriptor replaces the
// naps by sleeping on it. (Its spin is not shorter: measured on shared memory, UCX's wakeups
// after 64 rounds instead of 2000 cost half the busbw at 64 KiB-1 MiB.)
class Backoff {
 public:
  void reset() { quiet_ = 0; }  // progress was made
  // One round without progress.
  template <typename Nap>
  void pause(Nap nap) {
    if (quiet_++ == 0) naps_ = 0;
    if (naps_ == 0) {
      if (quiet_ % 64 != 0) return;
      std::this_thread::yield();
      // One clock read per 64 rounds, and none for the many waits shorter than that.
      auto now = std::chrono::steady_clock::now();
      if (quiet_ == 64) since_ = now;
      if (now - since_ < kSpinTime) return;
    }
    nap(std::chrono::microseconds(std::min(kMaxSleepUs, 1u << std::min(naps_++, 16u))));
  }

 private:
  unsigned quiet_ = 0, naps_ = 0;
  std::chrono::steady_clock::time_point since_;
};

void Engine::run() {
  Backoff backoff;
  unsigned rounds = 0;
  for (;;) {
    bool idleNow = false;
    if (progressOnce(&idleNow, ++rounds % kFullRoundEvery != 1)) {
      backoff.reset();
      continue;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (!incoming_.empty()) continue;
    if (idleNow || failed_ || drivers_ > 0)
      rounds = 0;  // it is going to sleep: the round after it is a full one (the watchdog's)
    if (idleNow || failed_) {
      if (stopping_) return;
      if (failed_ || !liveness_.enabled()) {
        wake_.wait(lock, [&] { return !incoming_.empty() || stopping_; });
      } else {  // idle, but heartbeats keep going out
        wake_.wait_for(lock, liveness_.period(), [&] { return !incoming_.empty() || stopping_; });
      }
      continue;
    }
    if (drivers_ > 0) {  // a waiter drives progress: stay off the cores until it leaves
      auto back = [&] { return drivers_ == 0 || stopping_; };
      if (liveness_.enabled())  // or until a heartbeat may be due: the engine may be idle by then
        wake_.wait_for(lock, liveness_.period(), back);
      else
        wake_.wait(lock, back);
      backoff.reset();
      continue;
    }
    backoff.pause([&](std::chrono::microseconds us) {
      rounds = 0;  // after a nap, a full round
      if (!events_.available()) {
        wake_.wait_for(lock, us);
        return;
      }
      napping_ = true;  // from here on, submissions poke events_
      lock.unlock();
      sleepOnEvents(kEventSleep);
      lock.lock();
      napping_ = false;
    });
  }
}

// Sleeps until the transport has news, events_ is poked, or `limit` passes; no lock held.
void Engine::sleepOnEvents(std::chrono::microseconds limit) {
  bool armed;
  {
    std::lock_guard<std::mutex> progress(progress_);  // the transport takes one call at a time
    armed = transport_->armEvents();
  }
  if (armed) events_.sleep(limit);
}

void Engine::wakeProgress() {
  wake_.notify_one();
  if (napping_) events_.wake();
}

void Engine::drive(OpState& op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++drivers_;
  }
  Backoff backoff;
  // An inline op has nothing for a full round to take (its submission posted it and ran the
  // watchdog): its rounds start light.
  unsigned rounds = op.inlined ? 1 : 0;
  bool idleNow = false;
  while (!op.done.load(std::memory_order_acquire)) {
    if (progressOnce(&idleNow, ++rounds % kFullRoundEvery != 1)) {
      backoff.reset();
      continue;
    }
    backoff.pause([&](std::chrono::microseconds us) {
      rounds = 0;  // after a nap, a full round
      if (events_.available()) {
        // Another driver may finish this op meanwhile: progressOnce() pokes events_ then.
        sleepingDrivers_.fetch_add(1);
        if (!op.done.load(std::memory_order_acquire)) sleepOnEvents(kEventSleep);
        sleepingDrivers_.fetch_sub(1);
        return;
      }
      std::unique_lock<std::mutex> lock(op.mutex);
      op.cv.wait_for(lock, us, [&] { return op.done.load(std::memory_order_acquire); });
    });
  }
  // The progress thread takes over whatever is still in flight. Only new submissions make an
  // idle engine busy again, and they wake the progress thread themselves once no driver is left.
  // An idle engine's heartbeats need no wake-up either: the progress thread waits at most one
  // heartbeat period. (Waking it after every op cost small ops half their speed when ranks
  // share cores: issue 19.)
  std::lock_guard<std::mutex> lock(mutex_);
  if (--drivers_ == 0 && (!idleNow || !incoming_.empty())) wakeProgress();
}

bool Engine::takeSubmissions() {
  std::vector<std::shared_ptr<OpState>>& fresh = taken_;  // its capacity goes back and forth
  {
    std::lock_guard<std::mutex> lock(mutex_);
    hasIncoming_.store(false, std::memory_order_relaxed);
    if (incoming_.empty()) return false;
    fresh.swap(incoming_);
  }
  struct Clear {  // whatever happens below, no op stays behind in taken_
    std::vector<std::shared_ptr<OpState>>& v;
    ~Clear() { v.clear(); }
  } clear{fresh};
  for (auto& op : fresh) {
    if (op->kind != OpState::Kind::kAllReduce) {  // point to point: matched by order per lane
      if (op->count == 0) {
        finishOp(*op, priocclSuccess, "");
        continue;
      }
      op->algorithm = priocclAlgoRing;  // chunked as a ring op of its size, alike on both ends
      matcher_.numberPointToPoint(*op);
      uint32_t lane = lanes_.pointToPointLane(op->peer, op->kind == OpState::Kind::kSend, op->tag);
      addLive(lane, std::move(op));
      continue;
    }
    // The algorithm is settled once, from arguments every rank agrees on (and a table every rank
    // holds alike); a mismatched op fails before its algorithm matters.
    if (op->algorithm == priocclAlgoAuto)
      op->algorithm = selector_.choose(op->count * reduce::dtypeSize(op->dtype));
    Announce a = matcher_.number(*op);
    if (!op->named) {  // agreed among the ranks themselves, in submission order
      addLive(kAgreeLane, std::move(op));
      continue;
    }
    // Even with nothing to move, a named op is matched: a rank with count 0 where the others
    // have data must fail everywhere, not leave them waiting.
    matcher_.awaitDecision(std::move(op), a);
    negotiator_.submit(a);
  }
  return true;
}

ChunkSpec Engine::chunkSpec(const OpState& op, size_t first, size_t count) const {
  size_t elem = reduce::dtypeSize(op.dtype);
  ChunkSpec spec;
  spec.send = static_cast<const unsigned char*>(op.send) + first * elem;
  spec.recv = static_cast<unsigned char*>(op.recv) + first * elem;
  spec.count = count;
  spec.dtype = op.dtype;
  spec.op = op.op;
  spec.rank = rank_;
  spec.nranks = nranks_;
  return spec;
}

// The scheduler's pass: control messages, then activation, then sends.
bool Engine::schedule() {
  bool moved = exchangeControl();
  moved |= activate();
  moved |= postSends();
  return moved;
}

// Sends what the negotiator has to say and turns its decisions into live ops, in global order.
bool Engine::exchangeControl() {
  bool any = false;
  for (Negotiator::Outgoing& out : negotiator_.takeOutgoing()) {
    transfers_.sendControl(out.peer, std::move(out.bytes));
    any = true;
  }
  for (const Decision& d : negotiator_.takeDecisions()) {
    applyDecision(d);
    any = true;
  }
  return any;
}

void Engine::applyDecision(const Decision& d) {
  std::string mismatch;
  std::shared_ptr<OpState> op = matcher_.decided(d, &mismatch);
  noteMatched(*op);
  if (!mismatch.empty()) {
    finishOp(*op, priocclInvalidUsage, mismatch);
    return;
  }
  if (op->count == 0) {  // matched, nothing to move
    finishOp(*op, priocclSuccess, "");
    return;
  }
  addLive(kNamedLane, std::move(op));
}

// The op's identity is now agreed by every rank: the end of its QUEUE phase.
void Engine::noteMatched(const OpState& op) {
  Clock::time_point now = Clock::now();
  counters_.queueWaitNs.fetch_add(
      static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - op.submitted).count()),
      std::memory_order_relaxed);
  if (timeline_.enabled()) {
    static const std::string kUnnamed;
    const std::string& key = op.named ? op.key : kUnnamed;
    uint64_t track = timelineTrack(op);
    timeline_.nameTrack(track, op.named
                                   ? concat("op '", key, "' #", op.occurrence, " p", op.priority)
                                   : concat("op ", track, " p", op.priority));
    timeline_.span(
        "QUEUE", track, op.submitted, now,
        {{"priority", op.priority}, {"count", static_cast<int64_t>(op.count)}, {"key", 0, &key}});
  }
}

LiveOp& Engine::addLive(uint32_t lane, std::shared_ptr<OpState> op) {
  // An agreement is one chunk of the whole op (which reduces it when it carries the data).
  uint64_t chunks = 1;
  size_t chunkCount = op->count;
  if (lane != kAgreeLane) {
    chunkCount = chunkElements(*op);
    chunks = (op->count + chunkCount - 1) / chunkCount;
  }
  schedulerNews_ = true;
  int priority = schedulingPriority(*op);
  return lanes_.add(lane, std::move(op), chunks, chunkCount, priority,
                    config_.schedule != priocclScheduleFifo);
}

// Elements per chunk of `op`. A ring or tree op of a few chunks is cut finer (down to
// kMinChunkBytes) so that several chunks pipeline even then; recursive doubling moves whole
// chunks every round, so it gains nothing from cutting, and halving-doubling, chosen for the
// middle sizes, would pay its 2 log2(p) rounds once per piece. Depends only on arguments every rank
// agrees on, so every rank cuts the op alike.
size_t Engine::chunkElements(const OpState& op) const {
  size_t elem = reduce::dtypeSize(op.dtype);
  size_t bytes = op.count * elem;
  size_t chunk =
      algoEntry(op.algorithm).wholeChunks
          ? config_.chunkBytes
          : std::min(config_.chunkBytes, std::max(kMinChunkBytes, bytes / kMinChunksPerOp));
  return std::max<size_t>(1, chunk / elem);
}

// Activation: in lane order inside the window (what deadlock freedom rests on), and, under
// priority scheduling, the most urgent ops' chunks wherever they lie (the priority horizon).
bool Engine::activate() {
  bool any = false;
  for (uint32_t l = 0; l < lanes_.size(); ++l) {
    while (LiveOp* live = lanes_.nextInOrder(l)) {
      activateChunk(l, *live);
      any = true;
    }
    while (LiveOp* live = lanes_.nextByPriority(l)) {
      activateChunk(l, *live);
      any = true;
    }
  }
  return any;
}

void Engine::activateChunk(uint32_t l, LiveOp& live) {
  const OpState& op = *live.op;
  size_t first = live.nextChunk * live.chunkCount;
  ChunkSpec spec = chunkSpec(op, first, std::min(live.chunkCount, op.count - first));
  Slot& slot = lanes_.activate(l, live);
  makeChunk(slot, spec);
  scheduler_.chunkActivated(slot.priority);
  pump(slot);  // may finish the chunk, and erase the slot
}

bool Engine::carries(const OpState& op) {
  return op.count * reduce::dtypeSize(op.dtype) <= kCarryMaxBytes &&
         algoEntry(op.algorithm).agreementCarries;
}

void Engine::makeChunk(Slot& slot, const ChunkSpec& spec) {
  const OpState& op = *slot.live->op;
  if (LaneTable::isPointToPoint(slot.lane)) {
    slot.algo = std::make_unique<PointToPointChunk>(spec, op.peer, op.kind == OpState::Kind::kSend);
  } else if (slot.lane == kAgreeLane) {
    // Small ops whose algorithm is recursive doubling or halving-doubling are reduced by the
    // agreement itself.
    auto agreement = std::make_unique<AgreementChunk>(spec, agreeScratch_, OpMatcher::arguments(op),
                                                      carries(op), kCarryMaxBytes,
                                                      op.algorithm == priocclAlgoHalvingDoubling);
    slot.agreement = agreement.get();
    slot.algo = std::move(agreement);
  } else {
    slot.algo = algoEntry(op.algorithm).make(spec, scratch_);
  }
}

// Posts what a chunk can post without the scheduler (receives), queues its ready send, and
// retires it when done.
void Engine::pump(Slot& slot) {
  ChunkAlgo& algo = *slot.algo;
  while (algo.recvReady()) postData(slot, algo.takeRecv(), true);
  if (algo.finished()) {
    finishChunk(slot);
    return;
  }
  if (algo.sendReady() && !slot.queued) {
    scheduler_.push({slot.priority, slot.gid, slot.lane});
    slot.queued = true;
  }
}

Engine::Posted& Engine::postTransfer(uint32_t lane, uint64_t gid, const Transfer& t, bool isRecv,
                                     SendCompletion completion) {
  uint64_t cookie = transfers_.post(isRecv ? Kind::kDataRecv : Kind::kDataSend, t.peer,
                                    lanes_.tagOf(lane, gid, t.step), t.buf, t.bytes, completion);
  Posted& p = transfers_.at(cookie);
  p.lane = lane;
  p.exact = t.exact;
  p.gid = gid;
  p.step = t.step;
  if (!isRecv) counters_.sendsPosted.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void Engine::postData(Slot& slot, const Transfer& t, bool isRecv) {
  Posted& p = postTransfer(slot.lane, slot.gid, t, isRecv);
  if (isRecv) return;
  p.priority = slot.priority;
  scheduler_.sendPosted(slot.priority, t.bytes);
  // A preemption: the wire moves to a more urgent chunk while the one it served still has work.
  if (auto before = scheduler_.recordSend(slot.lane, slot.gid, slot.priority);
      before && lanes_.find(before->lane, before->gid))
    counters_.preemptions.fetch_add(1, std::memory_order_relaxed);
}

bool Engine::pollTransport() {
  if (transport_->pending() == 0) return false;
  completions_.clear();
  transport_->poll(completions_);
  if (completions_.empty()) return false;
  Clock::time_point now = Clock::now();  // one clock read for the whole batch
  for (const Completion& c : completions_) {
    onCompletion(c, now);
    if (failed_) break;
  }
  return !completions_.empty();
}

void Engine::onCompletion(const Completion& c, Clock::time_point done) {
  const Posted p = transfers_.at(c.cookie);
  if (!c.ok) {
    // A peer that said goodbye may have closed its end under a heartbeat: not a failure.
    bool toGone = p.kind == Kind::kControlSend && liveness_.hasLeft(p.peer);
    if (!toGone) {
      failAll(c.code, c.error);
      return;
    }
  }
  transfers_.release(c.cookie);
  bool inlineOp =
      isInline(p.lane, p.gid) && (p.kind == Kind::kDataRecv || p.kind == Kind::kDataSend);
  if (!inlineOp) schedulerNews_ = true;
  if (p.kind == Kind::kControlSend) {
    transfers_.controlSent(c.cookie);
    return;
  }
  if (p.kind == Kind::kDataRecv || p.kind == Kind::kControlRecv) liveness_.heard(p.peer, done);
  if (p.kind == Kind::kControlRecv) {
    size_t i = static_cast<size_t>(p.step);
    int from = transfers_.controlPeers()[i];
    AbortNotice notice;
    ControlKind kind = negotiator_.onMessage(from, transfers_.controlMessage(i), c.bytes, &notice);
    if (kind == ControlKind::kAbort) {
      failFromPeer(from, notice);
      return;
    }
    if (kind == ControlKind::kGoodbye) liveness_.left(from);
    transfers_.repostControlReceive(i);
    return;
  }
  Slot* slot = inlineOp ? nullptr : lanes_.find(p.lane, p.gid);
  if (!inlineOp && !slot)
    fail(priocclInternalError, "completion for chunk ", p.gid, " that is not live");
  ChunkAlgo& algo = inlineOp ? *inline_.chunk : *slot->algo;
  OpState& op = inlineOp ? *inline_.op : *slot->live->op;
  bool isRecv = p.kind == Kind::kDataRecv;
  if (isRecv && !p.exact) algo.recvLength(p.step, c.bytes);
  if (isRecv && p.exact && c.bytes != p.bytes)
    fail(priocclRemoteError, "rank ", p.peer, " sent ", c.bytes, " bytes where ", p.bytes,
         " were expected: ranks disagree on the count or datatype of an op, or submitted "
         "different ops");
  op.lastProgress = lanes_[p.lane].lastProgress = done;
  if (isRecv) {
    counters_.bytesReceived.fetch_add(p.bytes, std::memory_order_relaxed);
    algo.recvDone(p.step);
  } else {
    if (!inlineOp) scheduler_.sendDone(p.priority, p.bytes, done);  // inline: no credit
    counters_.bytesSent.fetch_add(p.bytes, std::memory_order_relaxed);
    algo.sendDone(p.step);
  }
  if (timeline_.enabled()) {
    std::initializer_list<TimelineArg> args = {
        {"priority", op.priority},
        {"chunk", static_cast<int64_t>(slot ? slot->chunkIndex : 0)},
        {"step", static_cast<int64_t>(p.step)},
        {"bytes", static_cast<int64_t>(p.bytes)}};
    timeline_.span(isRecv ? "RECV" : "SEND", timelineTrack(op), p.start, done, args);
    if (isRecv) timeline_.span("REDUCE", timelineTrack(op), done, Clock::now(), args);
  }
  if (inlineOp)
    pumpInline();
  else
    pump(*slot);
}

// The scheduler: most urgent ready send first, while fewer than creditBytes are in flight.
bool Engine::postSends() {
  // Only a chunk with a send ready has anything to post, and every such chunk has an entry here.
  if (scheduler_.empty()) return false;
  bool any = false;
  // Each lane's oldest live chunk ignores the credit when the wire has stalled: see the deadlock
  // argument at the top of this file. Only then: a less urgent oldest chunk that always bypassed
  // the credit would keep the queue below the scheduler full ahead of urgent chunks.
  bool stalled = scheduler_.stalled(Clock::now());
  for (uint32_t l = 0; stalled && l < lanes_.size(); ++l) {
    uint64_t gid = lanes_[l].oldestGid;
    for (Slot* oldest = lanes_.find(l, gid); oldest && oldest->algo->sendReady();
         oldest = lanes_.find(l, gid)) {
      postData(*oldest, oldest->algo->takeSend(), false);
      any = true;
      pump(*oldest);  // may finish it
    }
  }
  while (!scheduler_.empty()) {
    const Scheduler::Ready e = scheduler_.top();
    Slot* current = lanes_.find(e.lane, e.gid);
    if (!current || !current->algo->sendReady()) {  // stale entry: posted through the oldest path
      scheduler_.pop();
      if (current) current->queued = false;
      continue;
    }
    Slot& slot = *current;
    if (!scheduler_.mayPost(e.priority)) break;  // the credit and fill rules
    scheduler_.pop();
    slot.queued = false;
    postData(slot, slot.algo->takeSend(), false);
    any = true;
    pump(slot);
  }
  return any;
}

void Engine::finishChunk(Slot& slot) {
  scheduler_.chunkFinished(slot.priority);
  // An agreement ends its op's matching, not the op (unless it carried the data): its verdict
  // decides.
  bool agreement = slot.agreement != nullptr;
  if (agreement) concludeAgreement(*slot.agreement, slot.live->op);
  LiveOp& live = lanes_.finish(slot);  // the slot is gone; a ready-heap entry of it is now stale
  counters_.chunksCompleted.fetch_add(1, std::memory_order_relaxed);
  if (!agreement && live.finished()) finishOp(*live.op, priocclSuccess, "");
}

// Every rank reaches the same verdict. Ops it leaves with data to move join the unnamed data lane
// in submission order, whatever order their agreements finished in.
void Engine::concludeAgreement(AgreementChunk& agreement, std::shared_ptr<OpState> op) {
  std::shared_ptr<OpState> moves;
  noteMatched(*op);
  if (std::string mismatch = matcher_.verdict(*op, agreement); !mismatch.empty()) {
    finishOp(*op, priocclInvalidUsage, mismatch);
  } else if (agreement.dataDone() || op->count == 0) {
    finishOp(*op, priocclSuccess, "");
  } else {
    moves = op;
  }
  matcher_.agreementEnded(op->globalSeq, std::move(moves), [&](std::shared_ptr<OpState> joins) {
    addLive(kUnnamedLane, std::move(joins));
  });
}

void Engine::finishOp(OpState& op, priocclResult_t code, const std::string& message) {
  (code == priocclSuccess ? counters_.opsCompleted : counters_.opsFailed)
      .fetch_add(1, std::memory_order_relaxed);
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

void Engine::sendToPeers(const std::vector<unsigned char>& bytes, int skip,
                         std::chrono::milliseconds limit) {
  std::vector<uint64_t> cookies;
  for (int peer : transfers_.controlPeers()) {
    // Peers that said goodbye still listen, until this rank's own goodbye.
    if (peer != skip) cookies.push_back(transfers_.sendControl(peer, bytes));
  }
  // Best effort: a dead peer's sends never leave, and nothing else waits on these.
  Clock::time_point deadline = Clock::now() + limit;
  std::vector<Completion> done;
  while (!cookies.empty() && Clock::now() < deadline) {
    done.clear();
    transport_->poll(done);
    for (const Completion& c : done) {
      cookies.erase(std::remove(cookies.begin(), cookies.end(), c.cookie), cookies.end());
      // A live engine handles everything (a peer's goodbye must not be lost); a failed one only
      // waits for its notices to leave.
      if (!failed_) onCompletion(c, Clock::now());
    }
    if (done.empty()) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void Engine::failWith(priocclResult_t code, const std::string& full, const AbortNotice* tell,
                      int skipPeer) {
  log(LogLevel::kWarn, full);
  errorLog_->set(full);
  std::vector<std::shared_ptr<OpState>> doomed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_ = true;
    failCode_ = code;
    failMessage_ = full;
    doomed.swap(incoming_);
  }
  if (tell && !saidGoodbye_) sendToPeers(encodeAbort(*tell), skipPeer, kAbortFlush);
  transport_->cancelAll();
  if (inline_.op) doomed.push_back(std::move(inline_.op));
  inline_.chunk.reset();  // its transfers are cancelled
  lanes_.clear(doomed);
  scheduler_.clear();
  transfers_.clear();
  matcher_.clear(doomed);
  for (auto& op : doomed)
    if (op && !op->ended) finishOp(*op, code, full);
}

}  // namespace prioccl::detail
