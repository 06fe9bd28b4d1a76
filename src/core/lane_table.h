// Lanes: the chunk identity spaces of one communicator, which chunks of theirs are live, and the
// tag layout (the only place that knows it).
//
// A lane is an order of ops that is the same on every rank: named ops in the coordinator's
// decision order, unnamed ops' agreements and then their data in submission order, and one lane
// per (peer, direction, user tag) of point-to-point ops in submission order. An op's chunks take
// the lane's next identities (gids) when it joins, so every rank gives a chunk the same gid.
//
// Deadlock freedom rests on the activation rule kept here. In each lane a rank keeps every chunk
// in [oldest unfinished, oldest + window) live (nextInOrder), and once the wire has stalled each
// lane's oldest unfinished chunk may post its sends, credit or not (the engine, with
// scheduler.h). Chunks beyond the window may be live too, in priority order (nextByPriority),
// which differs between ranks; their sends may wait for a receiver that has not activated them,
// but the transport keeps such a message aside as unexpected (MPI and UCX tag matching), so it
// never holds back a later message on the same link (transport.h). Sends in flight can only stay
// so if their receivers have not reached those chunks yet; the globally oldest unfinished chunk
// is live with receives posted on every rank that still needs it, so within a stall period it can
// always move, and by induction every chunk completes. Collective chunks need every rank, so a
// chunk finishes only once every rank activated it; with activation bounded to half the tag space
// past the rank's oldest chunk, every live gid lies within one tag space of the global oldest,
// which is why collective tags only need to be unique modulo tagChunks(). Point-to-point lanes
// activate in lane order only, so their live gids stay within [global oldest, + 2 * window).
//
// Passive: no transport, no clock but the one progress stamp per lane, no threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "algo/chunk_algo.h"
#include "common/engine_clock.h"
#include "core/op.h"
#include "core/priority_counts.h"

namespace prioccl::detail {

class AgreementChunk;

// The fixed lanes. Named ops get their order from the coordinator; unnamed ops from submission
// order: first their agreement (one chunk each, which also reduces small ops), then, in the same
// order, the data chunks of those that need them. The orders differ between the lanes, so they
// cannot share identities. Lanes from kFixedLanes on carry point-to-point ops, made on first use.
inline constexpr uint32_t kNamedLane = 0, kAgreeLane = 1, kUnnamedLane = 2, kFixedLanes = 3;
// Joining "the point-to-point lanes" means the op's own: by peer, direction and user tag.
inline constexpr uint32_t kPointToPointLanes = kFixedLanes;
// Tag shares: one per fixed lane, then one that all point-to-point lanes split.
inline constexpr uint64_t kPointToPointShare = kFixedLanes;

// An op in a lane.
struct LiveOp {
  std::shared_ptr<OpState> op;
  uint64_t firstGid = 0;  // identity of its chunk 0: the same on every rank (lane order)
  uint64_t chunks = 0;
  size_t chunkCount = 0;   // elements per chunk (the last may have fewer)
  int priority = 0;        // scheduling priority (0 for all under FIFO)
  uint64_t nextChunk = 0;  // next chunk to activate (an op's chunks activate in index order)
  uint64_t chunksDone = 0;
  bool finished() const { return chunksDone == chunks; }
};

// A live chunk: posted or postable transfers.
struct Slot {
  std::unique_ptr<ChunkAlgo> algo;      // set by the engine right after activation
  AgreementChunk* agreement = nullptr;  // algo, when it is an agreement (its verdict is read)
  LiveOp* live = nullptr;               // deque elements stay put while the deque grows at the back
  uint32_t lane = 0;
  uint64_t gid = 0;
  uint64_t chunkIndex = 0;
  int priority = 0;     // scheduling priority, fixed at activation
  bool queued = false;  // has an entry in the scheduler's ready heap
};

class LaneTable {
 public:
  using Clock = EngineClock;
  struct Lane {
    std::deque<LiveOp> live;  // in the lane's order; finished ops leave from the front (retire)
    size_t activating = 0;    // index in live of the first op with chunks left to activate
    uint64_t nextBase = 0;    // firstGid of the next op to join the lane
    uint64_t oldestGid = 0;   // every chunk below this has finished on this rank
    std::map<uint64_t, Slot> slots;  // live chunks by gid (nodes stay put)
    // Ops with chunks left to activate, most urgent first, then in lane order: collective lanes
    // under priority scheduling only.
    std::set<std::tuple<int, uint64_t, LiveOp*>> pending;
    PriorityCounts livePriorities;                  // live chunks by scheduling priority
    int userTag = 0;                                // point-to-point lanes: the user's tag
    Clock::time_point lastProgress = Clock::now();  // last data completion in the lane
  };

  // `dataTags`: tags [0, dataTags) are the lanes'. `maxSteps`: the most step ids a chunk of any
  // algorithm uses. `windowChunks`: the in-order window, limited to what the tags allow.
  LaneTable(uint64_t dataTags, uint64_t maxSteps, uint64_t windowChunks);

  // The tag layout: [lane share | chunk gid modulo the share | step]. Point-to-point lanes share
  // the last share, split by user tag, 2 x window identities each.
  // (Inline, as find(): the progress thread calls both for every transfer and completion.)
  uint64_t tagOf(uint32_t lane, uint64_t gid, int step) const {
    if (isPointToPoint(lane)) {  // live chunks of a lane differ modulo 2 x window
      uint64_t stride = 2 * window_;
      uint64_t user = static_cast<uint64_t>(lanes_[lane].userTag);
      return ((kPointToPointShare * tagChunks_ + user * stride + gid % stride) << stepBits_) |
             static_cast<uint64_t>(step);
    }
    return ((lane * tagChunks_ + gid % tagChunks_) << stepBits_) | static_cast<uint64_t>(step);
  }
  uint64_t chunkOfTag(uint64_t tag, int* lane) const;  // the inverse, for tests watching the wire
  int pointToPointTags() const;                        // user tags: 0 <= tag < this
  size_t window() const { return window_; }
  bool windowLimited() const { return windowLimited_; }  // by the tag space

  size_t size() const { return lanes_.size(); }
  Lane& operator[](uint32_t l) { return lanes_[l]; }
  const Lane& operator[](uint32_t l) const { return lanes_[l]; }
  static bool isPointToPoint(uint32_t l) { return l >= kFixedLanes; }
  uint32_t pointToPointLane(int peer, bool isSend, int userTag);  // made on first use
  bool empty() const;                                             // no op in any lane

  // `op` joins lane `l` with `chunks` chunks of `chunkCount` elements. `byPriority`: its chunks
  // may activate beyond the window, most urgent first (collective lanes only).
  LiveOp& add(uint32_t l, std::shared_ptr<OpState> op, uint64_t chunks, size_t chunkCount,
              int priority, bool byPriority);
  // The lane's next gid, for a chunk that runs outside the table (the engine's inline path).
  uint64_t reserve(uint32_t l);

  // The op whose next chunk is inside the window: live on every rank that reaches it. Null: none.
  LiveOp* nextInOrder(uint32_t l);
  // The priority horizon. Beyond the in-order window, the ops more urgent than the next one in
  // lane order may activate, most urgent first, however much less urgent data came before them:
  // up to kPriorityWindows windows of live chunks in all, and up to kUrgentWindows for chunks at
  // least as urgent as every live chunk of the lane (P3's backward pass submits each layer more
  // urgent than all before it, so a full lane must still take the newest op at once). These bound
  // memory (a scratch block and a posted receive per live chunk), never order. Ranks may activate
  // in different orders, and even with different priorities for one op: that costs speed, never
  // bits, and the in-order window keeps the oldest chunk moving. Null: none now.
  LiveOp* nextByPriority(uint32_t l);
  static constexpr size_t kPriorityWindows = 2, kUrgentWindows = 4;
  // Makes the op's next chunk live (the caller gives it its algorithm).
  Slot& activate(uint32_t l, LiveOp& live);

  Slot* find(uint32_t l, uint64_t gid) {
    auto it = lanes_[l].slots.find(gid);
    return it == lanes_[l].slots.end() ? nullptr : &it->second;
  }
  const Slot* find(uint32_t l, uint64_t gid) const {
    auto it = lanes_[l].slots.find(gid);
    return it == lanes_[l].slots.end() ? nullptr : &it->second;
  }
  // The chunk has finished here: its slot goes (an entry for it in the ready heap is now stale).
  // Returns its op, whose finished() says whether this was its last chunk.
  LiveOp& finish(Slot& slot);
  void retire();  // finished ops leave the front of their lanes
  // Forgets every chunk and op; the ops still held go to `doomed`.
  void clear(std::vector<std::shared_ptr<OpState>>& doomed);

  template <typename F>
  void forEachOp(F&& f) const {  // f(const LiveOp&, const Lane&)
    for (const Lane& lane : lanes_)
      for (const LiveOp& live : lane.live) f(live, lane);
  }

 private:
  void updateOldest(Lane& lane);

  uint64_t stepBits_;
  uint64_t tagChunks_;  // each lane share's identities: live gids stay unique modulo this
  size_t window_;
  bool windowLimited_ = false;
  std::deque<Lane> lanes_;  // a deque: lanes added later leave the others in place
  std::map<std::tuple<int, int, int>, uint32_t> p2pLanes_;  // (peer, is a send, tag) -> lane
};

}  // namespace prioccl::detail
