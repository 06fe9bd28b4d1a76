// The engine: one progress thread per communicator owns the transport and every chunk.
//
// User threads enqueue ops (submit) and wait on their OpState. The progress thread
// negotiates each op's identity with the other ranks (negotiator.h), cuts matched ops into
// chunks, activates them inside a window of chunk identities, and at every step boundary (a
// completion or a new op) posts the ready send of the most urgent chunk while the credit window
// allows. See docs/scheduler.md.
//
// A thread blocked in wait() takes over the progress loop for as long as it waits (one thread at
// a time, under progress_), and the progress thread steps aside meanwhile. A blocking all-reduce
// then costs no thread hand-offs: on an oversubscribed host each wake-up of another thread costs
// more than a small op's whole exchange. Transport calls stay serialised; ops are finished (their
// callbacks run) outside the lock.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "algo/agreement.h"
#include "algo/chunk_algo.h"
#include "algo/select.h"
#include "common/event_sleep.h"
#include "common/scratch_pool.h"
#include "common/timeline.h"
#include "core/lane_table.h"
#include "core/liveness.h"
#include "core/negotiator.h"
#include "core/op.h"
#include "core/op_matcher.h"
#include "core/priority_counts.h"
#include "core/scheduler.h"
#include "core/transfers.h"
#include "transport.h"

namespace prioccl::detail {

class Engine;

// Outlives the engine, so that a late waiter learns safely that there is no engine to drive.
struct ProgressGate {
  std::mutex mutex;
  std::condition_variable cv;
  Engine* engine = nullptr;  // null once the engine has stopped
  int drivers = 0;           // threads inside Engine::drive
};

// Drives the op's engine until the op is done (no-op when the engine is gone).
void driveUntilDone(OpState& op);

class Engine {
 public:
  // Unnamed ops up to this size ride in their agreement messages when recursive doubling or
  // halving-doubling is their algorithm (see agreement.h): carries(op).
  static constexpr size_t kCarryMaxBytes = 64 << 10;
  static bool carries(const OpState& op);

  // `heartbeats`: the engine may call the transport while no op is in flight (not with an
  // application that has MPI only at MPI_THREAD_SERIALIZED); without, no peer is declared lost.
  // `timelineClock`: this rank's clock against rank 0's, for PRIOCCL_TIMELINE's timestamps.
  Engine(std::unique_ptr<Transport> transport, const Config& config, const AlgoSelector& selector,
         std::shared_ptr<ErrorLog> errorLog, bool heartbeats = true,
         const TimelineClock& timelineClock = {});
  ~Engine();  // drains, then stops the progress thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. The engine owns the op from here on. `callerWaits`: the caller is about to
  // drive progress in wait(), so the progress thread need not be woken (and a small unnamed op
  // on an idle engine may run inline: engine_inline.cpp).
  void submit(std::shared_ptr<OpState> op, bool callerWaits = false);
  // Runs the progress loop on the calling thread until `op` is done. Through driveUntilDone only.
  void drive(OpState& op);
  const std::shared_ptr<ProgressGate>& gate() const { return gate_; }
  // Finishes every submitted op, then joins the progress thread and says goodbye to the peers.
  // Idempotent.
  void drainAndStop();
  // Any thread: fails every pending and later op now and tells the other ranks.
  void abort();
  priocclCounters_t counters() const;
  // After the communicator's own ops at creation: counters restart from zero and unnamed ops
  // are numbered from here in messages.
  void startApplication();
  // The lane and chunk identity a data tag belongs to (for tests that watch the wire).
  // Point-to-point tags: 0 <= tag < this.
  int pointToPointTags() const { return lanes_.pointToPointTags(); }
  uint64_t chunkOfTag(uint64_t tag, int* lane) const { return lanes_.chunkOfTag(tag, lane); }
  // Replaces the cost model. Only before any op that leaves the algorithm to the model.
  void setSelector(const AlgoSelector& selector) {
    std::lock_guard<std::mutex> lock(progress_);
    selector_ = selector;
  }

 private:
  using Clock = std::chrono::steady_clock;
  using Kind = Transfers::Kind;
  using Posted = Transfers::Posted;  // a transfer handed to the transport

  void run();
  // One locked round of progress, then finishes the ops it ended. `idle`: nothing in flight.
  // `light`: see step().
  bool progressOnce(bool* idle, bool light = false);
  bool step(bool light);
  bool takeSubmissions();
  // Elements [first, first + count) of `op` as a chunk.
  ChunkSpec chunkSpec(const OpState& op, size_t first, size_t count) const;
  bool schedule();
  bool exchangeControl();
  void applyDecision(const Decision& d);
  void noteMatched(const OpState& op);
  LiveOp& addLive(uint32_t lane, std::shared_ptr<OpState> op);
  bool activate();
  void makeChunk(Slot& slot, const ChunkSpec& spec);  // its algorithm (an agreement too)
  bool pollTransport();
  bool postSends();
  void pump(Slot& slot);
  void postData(Slot& slot, const Transfer& t, bool isRecv);
  void onCompletion(const Completion& c, Clock::time_point now);
  void finishChunk(Slot& slot);
  void concludeAgreement(AgreementChunk& agreement, std::shared_ptr<OpState> op);
  // A transfer of chunk `gid` of `lane` handed to the transport (no credit accounting).
  Posted& postTransfer(uint32_t lane, uint64_t gid, const Transfer& t, bool isRecv,
                       SendCompletion completion = SendCompletion::kEndToEnd);

  // The inline path (engine_inline.cpp): a blocking unnamed op small enough for its agreement to
  // reduce it, submitted while the engine is idle, runs its agreement chunk outside the lanes and
  // the scheduler. Same identity, tags and messages as on the lanes, so ranks that take either
  // path interoperate; only the bookkeeping a lone op does not need is skipped.
  bool tryInline(const std::shared_ptr<OpState>& op);
  void pumpInline();  // posts what the inline chunk has ready; concludes it once finished
  bool isInline(uint32_t lane, uint64_t gid) const {
    return inline_.op && lane == kAgreeLane && gid == inline_.gid;
  }
  // Counts the op as ended; finish() runs after the progress lock is released.
  void finishOp(OpState& op, priocclResult_t code, const std::string& message);
  // Fails the communicator: every pending and later op gets `code`. Unless the failure came from
  // a peer's abort, the control peers are told (the coordinator relays a peer's to the others).
  void failAll(priocclResult_t code, const std::string& message);
  void failFromPeer(int from, const AbortNotice& notice);
  void failWith(priocclResult_t code, const std::string& full, const AbortNotice* tell,
                int skipPeer);
  // Posts `bytes` to each control peer but `skip`, then polls up to `limit` for them to
  // leave (before the transport is torn down or its receives are cancelled).
  void sendToPeers(const std::vector<unsigned char>& bytes, int skip,
                   std::chrono::milliseconds limit);
  // Heartbeats, lost peers, stall warnings and timeouts; cheap, rate-limited.
  void watchdog();
  // For stall and timeout messages: what `op` waits for.
  std::string describePending(const OpState& op) const;
  std::string waitingFor(const OpState& op) const;
  bool idle() const;
  void sleepOnEvents(std::chrono::microseconds limit);
  void wakeProgress();  // under mutex_
  size_t chunkElements(const OpState& op) const;
  // FIFO mode schedules every op alike; ties then go by global op order.
  int schedulingPriority(const OpState& op) const {
    return config_.schedule == priocclScheduleFifo ? 0 : op.priority;
  }
  void activateChunk(uint32_t l, LiveOp& live);

  std::unique_ptr<Transport> transport_;
  const Config config_;
  AlgoSelector selector_;  // set before the first op that does not force its algorithm
  std::shared_ptr<ErrorLog> errorLog_;
  const int rank_, nranks_;

  std::shared_ptr<ProgressGate> gate_ = std::make_shared<ProgressGate>();
  // Held for every round of progress; guards all "progress thread only" state below.
  std::mutex progress_;

  // Shared with user threads.
  std::mutex mutex_;
  int drivers_ = 0;  // waiters driving progress now; the progress thread sleeps meanwhile
  std::condition_variable wake_;
  EventSleep events_;     // sleeping on the transport's descriptor, when it has one
  bool napping_ = false;  // the progress thread sleeps in events_: wakeProgress() must poke it
  std::atomic<int> sleepingDrivers_{0};  // waiters asleep in events_: ending ops poke it
  std::vector<std::shared_ptr<OpState>> incoming_;
  std::atomic<bool> hasIncoming_{false};  // incoming_ is not empty (read without mutex_)
  bool stopping_ = false;
  bool failed_ = false;
  priocclResult_t failCode_ = priocclSuccess;
  std::string failMessage_;

  // Progress state: only under progress_.
  struct Ended {
    std::shared_ptr<OpState> op;
    priocclResult_t code = priocclSuccess;
    std::string message;
  };
  std::vector<Ended> ended_;                     // to finish once the lock is released
  std::vector<std::shared_ptr<OpState>> taken_;  // takeSubmissions' batch
  Negotiator negotiator_;
  Liveness liveness_;
  Clock::time_point nextWatch_ = Clock::now();
  bool saidGoodbye_ = false;
  OpMatcher matcher_;         // op identities across ranks, and when each joins its lane
  LaneTable lanes_;           // lanes, their live chunks, windows and the tag layout
  Scheduler scheduler_;       // ready heap, credit, stall and preemption rules
  ScratchPool scratch_;       // data chunks
  ScratchPool agreeScratch_;  // agreement messages
  std::vector<Completion> completions_;
  Timeline timeline_;
  Transfers transfers_;  // the cookie table and the control channel (after timeline_)
  // Something the scheduler must see happened since the last poll (any completion but the inline
  // op's, a new live op): a light round runs the scheduler pass only then.
  bool schedulerNews_ = false;
  struct InlineOp {
    std::shared_ptr<OpState> op;  // null: none in flight
    uint64_t gid = 0;             // its agreement-lane identity
    std::optional<AgreementChunk> chunk;
  } inline_;

  struct Counters {
    std::atomic<uint64_t> opsSubmitted{0}, opsCompleted{0}, opsFailed{0}, chunksCompleted{0},
        sendsPosted{0}, bytesSent{0}, bytesReceived{0}, preemptions{0}, queueWaitNs{0};
  } counters_;

  std::thread thread_;
};

}  // namespace prioccl::detail
