// The engine: one progress thread per communicator owns the transport and every chunk.
//
// User threads only enqueue ops (submit) and wait on their OpState. The progress thread cuts ops
// into chunks, activates them inside a window of chunk identities, and at every step boundary
// (a completion or a new op) posts the ready send of the most urgent chunk while the credit
// window allows. See ARCHITECTURE.md, "The scheduler".
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "algo/chunk_algo.h"
#include "core/op.h"
#include "core/scratch_pool.h"
#include "transport.h"

namespace prioccl::detail {

class Engine {
 public:
  Engine(std::unique_ptr<Transport> transport, const Config& config,
         std::shared_ptr<ErrorLog> errorLog);
  ~Engine();  // drains, then stops the progress thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Assigns the op's sequence number; the engine owns it from here on.
  void submit(std::shared_ptr<OpState> op);
  // Finishes every submitted op, then joins the progress thread. Idempotent.
  void drainAndStop();

 private:
  // A chunk with posted or postable transfers. Lives in slots_[gid % window].
  struct Slot {
    std::unique_ptr<ChunkAlgo> algo;
    OpState* op = nullptr;  // kept alive by the op's entry in live_
    uint64_t gid = 0;
    uint64_t chunkIndex = 0;
    bool queued = false;  // has an entry in ready_
  };
  struct ReadyEntry {  // ordering key of a chunk with a send ready
    int priority;
    uint64_t seq;
    uint64_t chunkIndex;
    uint64_t gid;
    bool operator>(const ReadyEntry& o) const;
  };
  struct LiveOp {
    std::shared_ptr<OpState> op;
    uint64_t chunks = 0;
    uint64_t nextChunk = 0;  // next chunk to activate
  };
  // A transfer handed to the transport; its index is the transport cookie.
  struct Posted {
    uint64_t gid;
    int step;
    bool isRecv;
    size_t bytes;
  };

  void run();
  bool step();
  bool takeSubmissions();
  bool activate();
  bool pollTransport();
  bool postSends();
  void pump(Slot& slot);
  void post(Slot& slot, const Transfer& t, bool isRecv);
  void finishChunk(Slot& slot);
  void onCompletion(const Completion& c);
  void retireOps();
  void failAll(priocclResult_t code, const std::string& message);
  bool idle() const;
  uint64_t tagOf(uint64_t gid, int step) const;
  Slot& slotOf(uint64_t gid) { return slots_[gid % slots_.size()]; }

  std::unique_ptr<Transport> transport_;
  const Config config_;
  std::shared_ptr<ErrorLog> errorLog_;
  const int rank_, nranks_;
  const uint64_t stepBits_;
  uint64_t tagChunks_ = 0;  // live chunk identities stay unique modulo this

  // Shared with user threads.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::shared_ptr<OpState>> incoming_;
  uint64_t nextSeq_ = 0;
  bool stopping_ = false;
  bool failed_ = false;
  priocclResult_t failCode_ = priocclSuccess;
  std::string failMessage_;

  // Progress thread only.
  std::deque<LiveOp> live_;  // submission order
  size_t activating_ = 0;    // index in live_ of the first op with chunks left to activate
  uint64_t nextGid_ = 0;     // identity of the next chunk to activate
  uint64_t oldestGid_ = 0;   // every chunk below this has finished on this rank
  std::vector<Slot> slots_;
  std::priority_queue<ReadyEntry, std::vector<ReadyEntry>, std::greater<ReadyEntry>> ready_;
  size_t inflightBytes_ = 0;
  std::vector<Posted> posted_;
  std::vector<uint64_t> freePosted_;
  ScratchPool scratch_;
  std::vector<Completion> completions_;
  std::thread thread_;
};

}  // namespace prioccl::detail
