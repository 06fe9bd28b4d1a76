// The engine: one progress thread per communicator owns the transport and every chunk.
//
// User threads only enqueue ops (submit) and wait on their OpState. The progress thread
// negotiates each op's identity with the other ranks (negotiator.h), cuts matched ops into
// chunks, activates them inside a window of chunk identities, and at every step boundary (a
// completion or a new op) posts the ready send of the most urgent chunk while the credit window
// allows. See ARCHITECTURE.md, "The scheduler".
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "algo/chunk_algo.h"
#include "core/negotiator.h"
#include "core/op.h"
#include "core/scratch_pool.h"
#include "core/timeline.h"
#include "transport.h"

namespace prioccl::detail {

class Engine {
 public:
  Engine(std::unique_ptr<Transport> transport, const Config& config,
         std::shared_ptr<ErrorLog> errorLog);
  ~Engine();  // drains, then stops the progress thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. The engine owns the op from here on.
  void submit(std::shared_ptr<OpState> op);
  // Finishes every submitted op, then joins the progress thread. Idempotent.
  void drainAndStop();
  priocclCounters_t counters() const;

 private:
  using Clock = std::chrono::steady_clock;
  // A chunk with posted or postable transfers. Lives in slots_[gid % window].
  struct Slot {
    std::unique_ptr<ChunkAlgo> algo;
    OpState* op = nullptr;  // kept alive by the op's entry in live_
    uint64_t gid = 0;
    uint64_t chunkIndex = 0;
    bool queued = false;  // has an entry in ready_
  };
  // Scheduling key of a chunk with a send ready: priority, then global op order and chunk
  // (gids follow both), so ties go in submission order and every rank agrees on them.
  struct ReadyEntry {
    int priority;
    uint64_t gid;
    bool operator>(const ReadyEntry& o) const {
      return priority != o.priority ? priority > o.priority : gid > o.gid;
    }
  };
  struct LiveOp {
    std::shared_ptr<OpState> op;
    uint64_t chunks = 0;
    size_t chunkCount = 0;   // elements per chunk (the last may have fewer)
    uint64_t nextChunk = 0;  // next chunk to activate
  };
  // A transfer handed to the transport; its index is the transport cookie.
  enum class Kind : uint8_t { kDataSend, kDataRecv, kControlSend, kControlRecv };
  struct Posted {
    Kind kind;
    int step;      // data: the chunk's step; control receive: index into controlRecv_
    uint64_t gid;  // data: the chunk
    size_t bytes;
    Clock::time_point start;
  };
  using Identity = std::pair<uint64_t, uint64_t>;  // (key hash, occurrence)

  void run();
  bool step();
  bool takeSubmissions();
  bool exchangeControl();
  void applyDecision(const Decision& d);
  bool activate();
  bool pollTransport();
  bool postSends();
  void pump(Slot& slot);
  uint64_t post(Kind kind, int peer, uint64_t tag, void* buf, size_t bytes);
  void postData(Slot& slot, const Transfer& t, bool isRecv);
  void onCompletion(const Completion& c);
  void finishChunk(Slot& slot);
  void finishOp(OpState& op, priocclResult_t code, const std::string& message);
  void retireOps();
  void failAll(priocclResult_t code, const std::string& message);
  bool idle() const;
  size_t chunkElements(const OpState& op) const;
  // FIFO mode schedules every op alike; ties then go by global op order.
  int schedulingPriority(const OpState& op) const {
    return config_.schedule == priocclScheduleFifo ? 0 : op.priority;
  }
  uint64_t tagOf(uint64_t gid, int step) const;
  Slot& slotOf(uint64_t gid) { return slots_[gid % slots_.size()]; }

  std::unique_ptr<Transport> transport_;
  const Config config_;
  std::shared_ptr<ErrorLog> errorLog_;
  const int rank_, nranks_;
  const uint64_t stepBits_;
  uint64_t tagChunks_ = 0;   // live chunk identities stay unique modulo this
  uint64_t controlTag_ = 0;  // above every data tag

  // Shared with user threads.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::shared_ptr<OpState>> incoming_;
  bool stopping_ = false;
  bool failed_ = false;
  priocclResult_t failCode_ = priocclSuccess;
  std::string failMessage_;

  // Progress thread only.
  Negotiator negotiator_;
  std::map<uint64_t, uint64_t> occurrences_;  // per key hash: ops submitted so far
  std::map<Identity, std::shared_ptr<OpState>> negotiating_;
  std::vector<std::vector<unsigned char>> controlRecv_;  // one standing receive per control peer
  std::vector<int> controlPeers_;
  std::map<uint64_t, std::vector<unsigned char>> controlSends_;  // by cookie, until sent
  std::deque<LiveOp> live_;                                      // global op order
  size_t activating_ = 0;    // index in live_ of the first op with chunks left to activate
  uint64_t decidedOps_ = 0;  // global sequence of the next decided op
  uint64_t nextGid_ = 0;     // identity of the next chunk to activate
  uint64_t oldestGid_ = 0;   // every chunk below this has finished on this rank
  std::vector<Slot> slots_;
  std::priority_queue<ReadyEntry, std::vector<ReadyEntry>, std::greater<ReadyEntry>> ready_;
  size_t inflightBytes_ = 0;
  Clock::time_point lastSendDone_ = Clock::now();
  std::map<int, uint64_t> activePriorities_;  // scheduling priority -> active chunks with it
  uint64_t lastSentGid_ = UINT64_MAX;         // chunk of the last send posted, to count preemptions
  int lastSentPriority_ = 0;
  std::vector<Posted> posted_;
  std::vector<uint64_t> freePosted_;
  ScratchPool scratch_;
  std::vector<Completion> completions_;
  Timeline timeline_;

  struct Counters {
    std::atomic<uint64_t> opsSubmitted{0}, opsCompleted{0}, opsFailed{0}, chunksCompleted{0},
        sendsPosted{0}, bytesSent{0}, bytesReceived{0}, preemptions{0}, queueWaitNs{0};
  } counters_;

  std::thread thread_;
};

}  // namespace prioccl::detail
