#include "core/collective_runner.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "reduce/reduce.h"

namespace prioccl::detail {

static_assert(
    static_cast<int>(CollKind::kAllReduce) == static_cast<int>(OpState::Kind::kAllReduce) &&
        static_cast<int>(CollKind::kBroadcast) == static_cast<int>(OpState::Kind::kBroadcast) &&
        static_cast<int>(CollKind::kReduce) == static_cast<int>(OpState::Kind::kReduce) &&
        static_cast<int>(CollKind::kAllGather) == static_cast<int>(OpState::Kind::kAllGather) &&
        static_cast<int>(CollKind::kReduceScatter) ==
            static_cast<int>(OpState::Kind::kReduceScatter) &&
        static_cast<int>(CollKind::kAllToAll) == static_cast<int>(OpState::Kind::kAllToAll) &&
        static_cast<int>(CollKind::kBarrier) == static_cast<int>(OpState::Kind::kBarrier),
    "CollKind mirrors OpState::Kind");

CollectiveRunner::CollectiveRunner(CollBackend& backend, const Config& config, bool coordinator,
                                   OpStats& stats, Events& events)
    : backend_(backend),
      chunkBytes_(std::max<size_t>(config.chunkBytes, 1)),
      byPriority_(config.schedule == priocclSchedulePriority),
      coordinator_(coordinator),
      stats_(stats),
      events_(events) {}

uint32_t CollectiveRunner::chunksOf(const OpState& op) const {
  using Kind = OpState::Kind;
  // Only the flat kinds are cut: a slice of a blocked one would need strided datatypes.
  if (op.kind != Kind::kAllReduce && op.kind != Kind::kBroadcast && op.kind != Kind::kReduce)
    return 1;
  size_t elems = std::max<size_t>(1, chunkBytes_ / reduce::dtypeSize(op.dtype));
  size_t chunks = (op.count + elems - 1) / elems;
  if (chunks > UINT32_MAX) fail(priocclInvalidArgument, "an op of ", op.count, " elements");
  return static_cast<uint32_t>(std::max<size_t>(chunks, 1));
}

bool CollectiveRunner::runs(OpState::Kind kind) {
  using Kind = OpState::Kind;
  switch (kind) {
    case Kind::kAllReduce:
    case Kind::kBroadcast:
    case Kind::kReduce:
    case Kind::kAllGather:
    case Kind::kReduceScatter:
    case Kind::kAllToAll:
    case Kind::kBarrier:
      return true;
    default:
      return false;
  }
}

void CollectiveRunner::add(std::shared_ptr<OpState> op) {
  Live live;
  live.chunks = chunksOf(*op);
  live.op = std::move(op);
  uint64_t seq = live.op->globalSeq;
  ops_.emplace(seq, std::move(live));
}

std::vector<LaunchEntry> CollectiveRunner::plan() {
  std::vector<LaunchEntry> out;
  while (planned_ - completed_ < kPlanAhead) {
    // The most urgent op with launches left (priority, then decision order); FIFO: the oldest.
    Live* best = nullptr;
    uint64_t bestSeq = 0;
    for (auto& [seq, live] : ops_) {
      if (live.planned == live.chunks) continue;
      if (!best || (byPriority_ && live.op->priority < best->op->priority)) {
        best = &live;
        bestSeq = seq;
      }
      if (!byPriority_) break;
    }
    if (!best) break;
    LaunchEntry e;
    e.op = bestSeq;
    e.chunk = best->planned++;
    e.chunks = best->chunks;
    queue_.push_back(e);
    out.push_back(e);
    ++planned_;
  }
  return out;
}

void CollectiveRunner::follow(const std::vector<LaunchEntry>& entries) {
  queue_.insert(queue_.end(), entries.begin(), entries.end());
}

size_t CollectiveRunner::launchElements(const Live& live) const {
  if (live.chunks == 1) return live.op->count;
  return std::max<size_t>(1, chunkBytes_ / reduce::dtypeSize(live.op->dtype));
}

CollLaunch CollectiveRunner::launchOf(Live& live, uint32_t chunk) {
  OpState& op = *live.op;
  const size_t elem = reduce::dtypeSize(op.dtype);
  CollLaunch c;
  c.kind = static_cast<CollKind>(op.kind);
  c.dtype = op.dtype;
  c.op = op.op;
  c.root = op.root;
  if (live.chunks == 1) {
    c.send = op.send;
    c.recv = op.recv;
    c.count = c.stride = op.count;
  } else {
    size_t per = launchElements(live);
    size_t first = static_cast<size_t>(chunk) * per;
    c.count = c.stride = std::min(per, op.count - first);
    c.send = op.send ? static_cast<const char*>(op.send) + first * elem : nullptr;
    c.recv = op.recv ? static_cast<char*>(op.recv) + first * elem : nullptr;
  }
  if (op.kind == OpState::Kind::kReduceScatter) {
    // In place, recvbuf is this rank's block of sendbuf; MPI (and NCCL) read sendbuf while
    // writing recvbuf, so the input goes through a copy.
    auto s = reinterpret_cast<uintptr_t>(op.send), r = reinterpret_cast<uintptr_t>(op.recv);
    size_t bytes = op.count * elem * static_cast<size_t>(backend_.size());
    if (op.count > 0 && r >= s && r < s + bytes && !backend_.inPlaceReduceScatter()) {
      live.input.assign(static_cast<const unsigned char*>(op.send),
                        static_cast<const unsigned char*>(op.send) + bytes);
      c.send = live.input.data();
    }
  }
  return c;
}

bool CollectiveRunner::launch() {
  bool any = false;
  while (!queue_.empty() && inFlight_.size() < kInFlight) {
    const LaunchEntry e = queue_.front();
    auto it = ops_.find(e.op);
    if (it == ops_.end()) {
      // Not decided here yet (its decision is on its way), or a corrupted plan.
      if (!ops_.empty() && e.op < ops_.begin()->first)
        fail(priocclRemoteError, "the coordinator's launch list names op #", e.op,
             ", which ended here: a corrupted or foreign control message");
      break;
    }
    Live& live = it->second;
    if (e.chunks != live.chunks || e.chunk >= live.chunks)
      fail(priocclInternalError, "launch ", e.chunk, " of ", e.chunks, " for ",
           kindName(live.op->kind), " #", e.op, ", which this rank cuts into ", live.chunks,
           " launches");
    // The coordinator plans an op's launches in order: anything else (a launch twice) is not its.
    if (e.chunk != live.launched)
      fail(priocclRemoteError, "the coordinator's launch list names launch ", e.chunk, " of ",
           kindName(live.op->kind), " #", e.op, " where launch ", live.launched,
           " is due: a corrupted or foreign control message");
    // A staged op launches once its input is on the host (whole: a launch of a blocked kind
    // reads every block); the copy needs nothing from the network, and the plan's order waits.
    if (live.op->staging && !live.op->staging->inputReady(SIZE_MAX)) break;
    queue_.pop_front();
    if (!coordinator_) live.planned = std::max(live.planned, e.chunk + 1);
    uint64_t cookie = nextCookie_++;
    CollLaunch c = launchOf(live, e.chunk);
    backend_.launch(c, cookie);
    stats_.sendPosted();
    // The counters' preemption: this launch goes before a less urgent op already under way.
    for (const auto& [seq, other] : ops_)
      if (seq != e.op && other.launched > 0 && other.launched < other.chunks &&
          other.op->priority > live.op->priority) {
        stats_.preempted();
        break;
      }
    ++live.launched;
    inFlight_.emplace(cookie, InFlight{e, c.count * reduce::dtypeSize(c.dtype), Clock::now()});
    any = true;
  }
  return any;
}

bool CollectiveRunner::poll(Clock::time_point now) {
  if (backend_.pending() == 0) return false;
  completions_.clear();
  if (backend_.poll(completions_) == 0) return false;
  for (const Completion& c : completions_) {
    auto it = inFlight_.find(c.cookie);
    if (it == inFlight_.end())
      fail(priocclInternalError, backend_.name(), " completed launch ", c.cookie,
           ", which was never made");
    if (!c.ok) fail(c.code, c.error);
    const InFlight f = it->second;
    const LaunchEntry& e = f.entry;
    inFlight_.erase(it);
    ++completed_;
    lastProgress_ = now;
    Live& live = ops_.at(e.op);
    live.op->lastProgress = now;
    stats_.launched(*live.op, e.chunk, f.bytes, f.start, now);
    if (live.op->staging && live.op->sliced()) {  // this launch's result may go back now
      const size_t elem = reduce::dtypeSize(live.op->dtype), per = launchElements(live);
      const size_t first = static_cast<size_t>(e.chunk) * per;
      live.op->staging->resultDone(first * elem, std::min(per, live.op->count - first) * elem);
    }
    if (++live.done < live.chunks) continue;
    std::shared_ptr<OpState> op = std::move(live.op);
    ops_.erase(e.op);
    events_.opEnded(*op);
  }
  return true;
}

void CollectiveRunner::clear(std::vector<std::shared_ptr<OpState>>& doomed) {
  for (auto& entry : ops_) doomed.push_back(std::move(entry.second.op));
  ops_.clear();
  queue_.clear();
  inFlight_.clear();
}

std::string CollectiveRunner::waitingFor(const OpState& op) const {
  auto it = ops_.find(op.globalSeq);
  if (it == ops_.end()) return "not on the collective backend";
  const Live& live = it->second;
  return concat(live.done, " of ", live.chunks, " launches done (", live.planned,
                " planned by the coordinator; ", inFlight_.size(), " launches in flight, ",
                queue_.size(), " queued on this rank, in the coordinator's order)");
}

}  // namespace prioccl::detail
