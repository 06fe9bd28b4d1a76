// The data path of matched ops: lanes -> chunks (step machines) -> transfers -> the send scheduler
// -> completions. An op that joins a lane is cut into chunks; chunks activate inside the lane's
// window (and under priority scheduling beyond it, most urgent first); each posts its receives at
// once and queues its ready send, which the scheduler posts most urgent first while the credit
// allows; each data completion steps its chunk on. Why this cannot deadlock: lane_table.h (the
// activation window) and scheduler.h (the stall rule).
//
// Runs on the progress thread, under the engine's progress lock; no threads, locks or control
// messages of its own. It tells the engine when an agreement concludes and when an op's last
// chunk finishes (Events); errors are thrown (Error), and the engine fails the communicator.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "algo/agreement.h"
#include "algo/host_layout.h"
#include "common/engine_clock.h"
#include "common/scratch_pool.h"
#include "core/lane_table.h"
#include "core/op.h"
#include "core/op_stats.h"
#include "core/scheduler.h"
#include "core/transfers.h"
#include "prioccl/prioccl.hpp"

namespace prioccl::detail {

class ChunkRunner {
 public:
  using Clock = EngineClock;

  // What the engine learns from the chunks it runs.
  class Events {
   public:
    virtual ~Events() = default;
    // `op`'s agreement chunk has finished: its verdict decides what becomes of the op.
    virtual void agreementDone(const AgreementChunk& agreement, std::shared_ptr<OpState> op) = 0;
    virtual void opEnded(OpState& op) = 0;  // every data chunk of `op` has finished
  };

  // Unnamed ops up to this size ride in their agreement messages when recursive doubling or
  // halving-doubling is their algorithm (see agreement.h): carries(op).
  static constexpr size_t kCarryMaxBytes = 64 << 10;
  static bool carries(const OpState& op);

  // `dataTags`: tags [0, dataTags) are the lanes'. `hosts`: which ranks share a host (the
  // hierarchical all-reduce's levels); null: every rank its own host.
  ChunkRunner(const Config& config, int rank, int nranks, uint64_t dataTags, Transfers& transfers,
              OpStats& stats, Events& events, std::shared_ptr<const HostLayout> hosts = nullptr);

  // `op` (a collective's algorithm settled) joins `lane`, cut into chunks; a point-to-point op
  // joins its own lane (kPointToPointLanes: by peer, direction and tag).
  void add(uint32_t lane, std::shared_ptr<OpState> op);
  // The scheduler's half of a pass: activation, then the most urgent ready sends.
  bool activate();
  bool postSends();
  // A data transfer completed; `bytes` arrived (receives) or left.
  void onData(const Transfers::Posted& p, size_t bytes, Clock::time_point done);
  void retire() { lanes_.retire(); }
  bool empty() const { return !inline_.op && lanes_.empty(); }
  // Something the scheduler must see happened (a completion but the inline op's, a new live op).
  bool news() const { return news_; }
  void noteNews() { news_ = true; }
  void resetNews() { news_ = false; }

  // The inline path (docs in engine_inline.cpp): runs `op`'s agreement chunk, which carries its
  // data, outside the lanes and the scheduler, with the agreement lane's next identity.
  void runInline(std::shared_ptr<OpState> op, const Announce& announce);

  // Forgets every chunk (the transport's transfers were cancelled); the ops go to `doomed`.
  // Ends every op (into `doomed`): the communicator has failed. The scratch of its chunks stays
  // mapped (scratch_pool.h) until endTraffic().
  void clear(std::vector<std::shared_ptr<OpState>>& doomed);
  // The communicator's end: the transport has quiesced (nothing can write into scratch any
  // more), or the scratch is kept mapped for good.
  void endTraffic(bool transportQuiesced);

  const LaneTable& lanes() const { return lanes_; }  // the tag layout, for tests
  // The send credit's highest value so far (the tuner's doing; for the simulator and tests).
  size_t highestCredit() const { return std::max(highestCredit_, scheduler_.credit().base()); }
  Clock::time_point laneProgress(uint32_t lane) const { return lanes_[lane].lastProgress; }
  // f(op, lane's last progress) for every op moving data that has not ended.
  template <typename F>
  void forEachOp(F&& f) const {
    lanes_.forEachOp([&](const LiveOp& live, const LaneTable::Lane& lane) {
      if (!live.op->ended) f(*live.op, lane.lastProgress);
    });
    if (inline_.op) f(*inline_.op, lanes_[kAgreeLane].lastProgress);
  }
  // For stall and timeout messages: the peers whose data `op` waits for or whose receives have
  // not taken its sends; else why it has nothing posted.
  std::string waitingFor(const OpState& op) const;

 private:
  using Posted = Transfers::Posted;

  size_t chunkElements(const OpState& op) const;
  uint64_t headerBytes(const OpState& op) const;  // a point-to-point op's first-chunk header
  // Whether the op's next chunk in `lane` has its input (a staged op's copy may still run).
  bool inputReady(uint32_t lane, const LiveOp& live) const;
  ChunkSpec chunkSpec(const OpState& op, size_t first, size_t count) const;
  void activateChunk(uint32_t lane, LiveOp& live);
  void makeChunk(Slot& slot, const ChunkSpec& spec);      // its algorithm (an agreement too)
  void makeDataChunk(Slot& slot, const ChunkSpec& spec);  // ... by the op's kind
  // Posts what a chunk can post without the scheduler (receives), queues its ready send, and
  // retires it when done.
  void pump(Slot& slot);
  void pumpInline();  // posts what the inline chunk has ready; concludes it once finished
  void postData(Slot& slot, const Transfer& t, bool isRecv);
  // A transfer of chunk `gid` of `lane` handed to the transport (no credit accounting).
  Posted& postTransfer(uint32_t lane, uint64_t gid, const Transfer& t, bool isRecv,
                       SendCompletion completion = SendCompletion::kEndToEnd);
  void finishChunk(Slot& slot);
  void creditChanged();  // logs the tuned credit
  bool isInline(uint32_t lane, uint64_t gid) const {
    return inline_.op && lane == kAgreeLane && gid == inline_.gid;
  }

  const size_t chunkBytes_;
  const bool byPriority_;  // priority scheduling (FIFO: every op alike, in global op order)
  const int rank_, nranks_;
  Transfers& transfers_;
  OpStats& stats_;
  Events& events_;
  std::shared_ptr<const HostLayout> hosts_;
  LaneTable lanes_;
  Scheduler scheduler_;
  size_t highestCredit_ = 0;  // the tuned credit's highest value so far (creditChanged)
  ScratchPool scratch_;       // data chunks
  ScratchPool agreeScratch_;  // agreement messages
  bool news_ = false;
  struct InlineOp {
    std::shared_ptr<OpState> op;  // null: none in flight
    uint64_t gid = 0;             // its agreement-lane identity
    std::optional<AgreementChunk> chunk;
  } inline_;
};

}  // namespace prioccl::detail
