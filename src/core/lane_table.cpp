#include "core/lane_table.h"

#include <algorithm>
#include <climits>

#include "common/error.h"

namespace prioccl::detail {
namespace {

constexpr uint64_t kTagShares = kPointToPointShare + 1;

uint64_t bitsFor(uint64_t values) {
  uint64_t bits = 0;
  while ((uint64_t{1} << bits) < values) ++bits;
  return bits;
}

}  // namespace

LaneTable::LaneTable(uint64_t dataTags, uint64_t maxSteps, uint64_t windowChunks)
    : stepBits_(bitsFor(maxSteps)), tagChunks_((dataTags >> stepBits_) / kTagShares) {
  if (tagChunks_ < 2)
    fail(priocclInternalError, "transport tag space too small: ", dataTags,
         " data tags for chunks of ", maxSteps, " steps");
  uint64_t window = std::max<uint64_t>(1, windowChunks);
  if (2 * window > tagChunks_) {
    window = tagChunks_ / 2;
    windowLimited_ = true;
  }
  window_ = static_cast<size_t>(window);
  lanes_.resize(kFixedLanes);
}

uint64_t LaneTable::chunkOfTag(uint64_t tag, int* lane) const {
  *lane = static_cast<int>((tag >> stepBits_) / tagChunks_);
  return (tag >> stepBits_) % tagChunks_;
}

int LaneTable::pointToPointTags() const {
  return static_cast<int>(std::min<uint64_t>(tagChunks_ / (2 * window_), INT_MAX));
}

uint32_t LaneTable::pointToPointLane(int peer, bool isSend, int userTag) {
  auto key = std::make_tuple(peer, isSend ? 1 : 0, userTag);
  auto it = p2pLanes_.find(key);
  if (it != p2pLanes_.end()) return it->second;
  uint32_t lane = static_cast<uint32_t>(lanes_.size());
  lanes_.emplace_back().userTag = userTag;
  p2pLanes_.emplace(key, lane);
  return lane;
}

bool LaneTable::empty() const {
  return std::all_of(lanes_.begin(), lanes_.end(), [](const Lane& l) { return l.live.empty(); });
}

LiveOp& LaneTable::add(uint32_t l, std::shared_ptr<OpState> op, uint64_t chunks, size_t chunkCount,
                       int priority, bool byPriority) {
  Lane& lane = lanes_[l];
  LiveOp& added = lane.live.emplace_back();
  added.op = std::move(op);
  added.firstGid = lane.nextBase;
  added.chunks = chunks;
  added.chunkCount = chunkCount;
  added.priority = priority;
  lane.nextBase += chunks;
  if (byPriority && !isPointToPoint(l)) lane.pending.insert({priority, added.firstGid, &added});
  updateOldest(lane);
  return added;
}

uint64_t LaneTable::reserve(uint32_t l) {
  Lane& lane = lanes_[l];
  uint64_t gid = lane.nextBase++;
  updateOldest(lane);
  return gid;
}

// Every chunk in [oldest unfinished, oldest + window) of the lane's order is live once its op is
// here: the deadlock-freedom argument at the top of the header rests on this alone.
LiveOp* LaneTable::nextInOrder(uint32_t l) {
  Lane& lane = lanes_[l];
  for (size_t i = lane.activating; i < lane.live.size(); ++i) {
    LiveOp& live = lane.live[i];
    if (live.nextChunk == live.chunks) continue;  // all live already
    return live.firstGid + live.nextChunk < lane.oldestGid + window_ ? &live : nullptr;
  }
  return nullptr;
}

LiveOp* LaneTable::nextByPriority(uint32_t l) {
  Lane& lane = lanes_[l];
  if (lane.pending.empty() || lane.activating >= lane.live.size()) return nullptr;
  auto [priority, firstGid, live] = *lane.pending.begin();
  // Only ops more urgent than the one the in-order window serves next jump the queue: more
  // live chunks of that op (or of less urgent ones) would change no order, only make every
  // transport poll longer (MPI_Testsome walks every posted receive).
  if (priority >= lane.live[lane.activating].priority) return nullptr;
  bool urgent = lane.livePriorities.empty() || priority <= lane.livePriorities.mostUrgent();
  size_t limit = (urgent ? kUrgentWindows : kPriorityWindows) * window_;
  uint64_t gid = live->firstGid + live->nextChunk;
  // Tags stay unique: a chunk is live only within half the tag share of the oldest unfinished.
  if (lane.slots.size() >= limit || gid - lane.oldestGid >= tagChunks_ / 2) return nullptr;
  return live;
}

Slot& LaneTable::activate(uint32_t l, LiveOp& live) {
  Lane& lane = lanes_[l];
  uint64_t gid = live.firstGid + live.nextChunk;
  Slot& slot = lane.slots[gid];
  slot.live = &live;
  slot.lane = l;
  slot.gid = gid;
  slot.chunkIndex = live.nextChunk++;
  slot.priority = live.priority;
  lane.livePriorities.add(slot.priority, 1);
  if (live.nextChunk == live.chunks) {  // the in-order cursor may move past it
    lane.pending.erase({live.priority, live.firstGid, &live});
    updateOldest(lane);
  }
  return slot;
}

LiveOp& LaneTable::finish(Slot& slot) {
  LiveOp& live = *slot.live;
  Lane& lane = lanes_[slot.lane];
  lane.livePriorities.remove(slot.priority, 1);
  lane.slots.erase(slot.gid);
  updateOldest(lane);
  ++live.chunksDone;
  return live;
}

void LaneTable::retire() {
  for (Lane& lane : lanes_) {
    while (!lane.live.empty() && lane.activating > 0 && lane.live.front().finished()) {
      lane.live.pop_front();
      --lane.activating;
    }
  }
}

void LaneTable::clear(std::vector<std::shared_ptr<OpState>>& doomed) {
  // Chunks first: their algorithms may point into the ops' buffers.
  for (Lane& lane : lanes_) {
    lane.slots.clear();
    lane.pending.clear();
    lane.livePriorities.clear();
  }
  for (Lane& lane : lanes_) {
    for (LiveOp& live : lane.live) doomed.push_back(std::move(live.op));
    lane.live.clear();
    lane.activating = 0;
    lane.oldestGid = lane.nextBase;
  }
}

// The first gid of the lane not finished here: the lowest live chunk, or the first one not yet
// activated (an op's chunks activate in index order), or the next op's.
void LaneTable::updateOldest(Lane& lane) {
  while (lane.activating < lane.live.size() &&
         lane.live[lane.activating].nextChunk == lane.live[lane.activating].chunks)
    ++lane.activating;
  uint64_t oldest = lane.nextBase;
  if (lane.activating < lane.live.size()) {
    const LiveOp& live = lane.live[lane.activating];
    oldest = live.firstGid + live.nextChunk;
  }
  if (!lane.slots.empty()) oldest = std::min(oldest, lane.slots.begin()->first);
  lane.oldestGid = oldest;
}

}  // namespace prioccl::detail
