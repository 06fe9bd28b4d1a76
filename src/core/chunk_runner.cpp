#include "core/chunk_runner.h"

#include <algorithm>
#include <map>

#include "algo/all_gather.h"
#include "algo/all_to_all.h"
#include "algo/broadcast.h"
#include "algo/point_to_point.h"
#include "algo/reduce_scatter.h"
#include "algo/reduce_to_root.h"
#include "algo/registry.h"
#include "common/log.h"
#include "core/op_matcher.h"
#include "reduce/reduce.h"

namespace prioccl::detail {
namespace {

constexpr size_t kMinChunksPerOp = 4, kMinChunkBytes = 64 << 10, kMinSliceBytes = 16 << 10;
// The finer cut of an op whose algorithm keeps its steps (AlgoEntry::Cut) stops where a step
// (chunk / p) would fall below this: at hundreds of ranks four chunks of a 10 MB op made steps of
// a few KiB, each paying a message's costs (perf/sim, docs/scaling.md). Up to 8 ranks
// kMinChunkBytes is the larger, so nothing changes there. (A tree's step is half its chunk.)
constexpr size_t kMinStepBytes = 8 << 10;

// The most step ids a chunk of any algorithm uses: the tag layout reserves bits for them.
uint64_t maxSteps(int nranks) {
  // The collectives beside all-reduce (broadcast: 1).
  int most = std::max({ReduceChunk::steps(nranks), AllGatherChunk::steps(nranks),
                       ReduceScatterChunk::steps(nranks), AllToAllChunk::steps(nranks)});
  for (const AlgoEntry& e : algoRegistry()) most = std::max(most, e.steps(nranks));
  return static_cast<uint64_t>(most);
}

// The scratch of the largest chunk of any algorithm: one pool serves them all.
size_t maxScratchBytes(size_t chunkBytes, int nranks) {
  size_t most = chunkBytes;  // a reduce's and a reduce-scatter's blocks hold a chunk
  for (const AlgoEntry& e : algoRegistry())
    most = std::max(most, e.scratchBytes(chunkBytes, nranks));
  return most;
}

// The rate the credit tuner judges this rank's sends by: the link, or where several hosts have
// several ranks, this rank's share of its host's NIC. Those ranks all send across it at once (the
// hierarchical all-reduce, the fixed rule's choice there, runs one shard per rank), so none of
// them ever reaches kUnderused of the whole link, and against it every window that waited for the
// credit doubled it, towards its maximum: simulated, 64 ranks as 8 hosts x 8 at 10 Gbit/s,
// VGG-19's P3 iteration took 937.9 ms with the tuner, 822.8 ms with the credit fixed at its start
// and 823.4 ms judged by the share (docs/scaling.md). One host's ranks share no NIC: their link
// is their own.
double tunerLinkBytesPerSecond(double link, const HostLayout* hosts, int rank) {
  if (hosts == nullptr || hosts->hosts() < 2) return link;
  return link / static_cast<double>(hosts->members[hosts->hostOf[rank]].size());
}

}  // namespace

ChunkRunner::ChunkRunner(const Config& config, int rank, int nranks, uint64_t dataTags,
                         Transfers& transfers, OpStats& stats, Events& events,
                         std::shared_ptr<const HostLayout> hosts)
    : chunkBytes_(config.chunkBytes),
      byPriority_(config.schedule != priocclScheduleFifo),
      rank_(rank),
      nranks_(nranks),
      transfers_(transfers),
      stats_(stats),
      events_(events),
      hosts_(std::move(hosts)),
      lanes_(dataTags, maxSteps(nranks), config.windowChunks),
      scheduler_(config.creditBytes, config.creditMaxBytes,
                 tunerLinkBytesPerSecond(config.linkBytesPerSecond, hosts_.get(), rank)),
      scratch_(maxScratchBytes(config.chunkBytes, nranks)),
      agreeScratch_(AgreementChunk::scratchBytes(kCarryMaxBytes)) {
  if (lanes_.windowLimited())
    log(LogLevel::kWarn, "window limited to ", lanes_.window(),
        " chunks by the transport's tag space");
}

bool ChunkRunner::carries(const OpState& op) {
  return op.kind == OpState::Kind::kAllReduce &&
         op.count * reduce::dtypeSize(op.dtype) <= kCarryMaxBytes &&
         algoEntry(op.algorithm).agreementCarries;
}

void ChunkRunner::add(uint32_t lane, std::shared_ptr<OpState> op) {
  if (op->pointToPoint()) {
    op->algorithm = priocclAlgoRing;  // chunked as a ring op of its size, alike on both ends
    lane = lanes_.pointToPointLane(op->peer, op->kind == OpState::Kind::kSend, op->tag);
  }
  // An agreement is one chunk of the whole op (which reduces it when it carries the data).
  uint64_t chunks = 1;
  size_t chunkCount = op->count;
  if (lane != kAgreeLane) {
    chunkCount = chunkElements(*op);
    chunks = (op->count + chunkCount - 1) / chunkCount;
  }
  news_ = true;
  // FIFO mode schedules every op alike; ties then go by global op order.
  int priority = byPriority_ ? op->priority : 0;
  lanes_.add(lane, std::move(op), chunks, chunkCount, priority, byPriority_);
}

// Elements per chunk of `op`. A ring or tree op (or a broadcast) of a few chunks is cut finer (down
// to kMinChunkBytes, or kMinStepBytes per rank) so that several chunks pipeline even then;
// recursive doubling moves whole chunks every round, so it gains nothing from cutting, and
// halving-doubling, chosen for the middle sizes, would pay its 2 log2(p) rounds once per piece.
// Depends only on arguments every rank agrees on, so every rank cuts the op alike.
size_t ChunkRunner::chunkElements(const OpState& op) const {
  size_t elem = reduce::dtypeSize(op.dtype);
  size_t bytes = op.count * elem;
  const AlgoEntry::Cut cut =
      op.kind == OpState::Kind::kAllReduce ? algoEntry(op.algorithm).cut : AlgoEntry::Cut::kFiner;
  bool whole = cut == AlgoEntry::Cut::kWholeChunks;
  // Every step of the other collectives moves a whole chunk (a blocked kind's chunk is a slice of
  // every rank's block; a broadcast or reduce passes the chunk along its tree) where a ring
  // all-reduce's step moves chunk / p: cut by p, their messages are as long as the ring's, so
  // that several fit in the credit (sent back to back) and an urgent op waits behind no longer a
  // message. (Point-to-point ops keep whole chunks: their own lanes, no steps to pipeline.)
  bool wholeSteps = op.kind != OpState::Kind::kAllReduce && !op.pointToPoint();
  size_t cap = wholeSteps ? std::max(kMinSliceBytes, chunkBytes_ / static_cast<size_t>(nranks_))
                          : chunkBytes_;
  size_t finest = std::max(kMinChunkBytes, cut == AlgoEntry::Cut::kFinerKeepingSteps
                                               ? kMinStepBytes * static_cast<size_t>(nranks_)
                                               : 0);
  size_t chunk = whole ? chunkBytes_ : std::min(cap, std::max(finest, bytes / kMinChunksPerOp));
  return std::max<size_t>(1, chunk / elem);
}

// A point-to-point op's total length, sent with its first chunk, or 0 where no header is needed.
// With chunks of at least kMinChunkBytes (a multiple of every element size), an op shorter than
// that is one chunk of its own length, which mismatches the other end's first chunk (longer, or
// shorter) whenever the totals differ; only longer ops can differ by whole chunks and match every
// chunk they share. Both ends decide alone: an end that expects no header has a one-chunk op,
// which the other end's first chunk then mismatches. (Smaller chunks: every op has a header.)
uint64_t ChunkRunner::headerBytes(const OpState& op) const {
  size_t bytes = op.count * reduce::dtypeSize(op.dtype);
  return bytes >= (chunkBytes_ >= kMinChunkBytes ? kMinChunkBytes : 1) ? bytes : 0;
}

ChunkSpec ChunkRunner::chunkSpec(const OpState& op, size_t first, size_t count) const {
  size_t elem = reduce::dtypeSize(op.dtype);
  ChunkSpec spec;
  // A broadcast's non-root ranks have no send buffer (only the root's is read), a reduce's no
  // receive buffer (only the root's is written).
  spec.send = op.send ? static_cast<const unsigned char*>(op.send) + first * elem : nullptr;
  spec.recv = op.recv ? static_cast<unsigned char*>(op.recv) + first * elem : nullptr;
  spec.count = count;
  spec.dtype = op.dtype;
  spec.op = op.op;
  spec.rank = rank_;
  spec.nranks = nranks_;
  spec.hosts = hosts_.get();
  if (op.blocked()) {
    // Blocks of count elements, packed; a v-variant's from its own counts and displacements.
    spec.first = first;
    auto layout = [&op](const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
      BlockLayout l;
      l.count = op.count;
      if (!counts.empty()) l.counts = counts.data();
      if (!displs.empty()) l.displs = displs.data();
      return l;
    };
    spec.sendBlocks = layout(op.sendCounts, op.sendDispls);
    spec.recvBlocks = layout(op.recvCounts, op.recvDispls);
  }
  return spec;
}

// Activation: in lane order inside the window (what deadlock freedom rests on), and, under
// priority scheduling, the most urgent ops' chunks wherever they lie (the priority horizon).
bool ChunkRunner::activate() {
  bool any = false;
  for (uint32_t l = 0; l < lanes_.size(); ++l) {
    // A chunk whose input is still being copied from a device waits (the copy needs nothing from
    // the network, so it ends, and the stager pokes the engine); so do the lane's chunks behind.
    while (LiveOp* live = lanes_.nextInOrder(l)) {
      if (!inputReady(l, *live)) break;
      activateChunk(l, *live);
      any = true;
    }
    while (LiveOp* live = lanes_.nextByPriority(l)) {
      if (!inputReady(l, *live)) break;
      activateChunk(l, *live);
      any = true;
    }
  }
  return any;
}

bool ChunkRunner::inputReady(uint32_t lane, const LiveOp& live) const {
  const OpState& op = *live.op;
  if (!op.staging) return true;
  if (lane == kAgreeLane) return !carries(op) || op.staging->inputReady(SIZE_MAX);
  if (!op.sliced()) return op.staging->inputReady(SIZE_MAX);
  const size_t end = std::min<size_t>((live.nextChunk + 1) * live.chunkCount, op.count);
  return op.staging->inputReady(end * reduce::dtypeSize(op.dtype));
}

void ChunkRunner::activateChunk(uint32_t l, LiveOp& live) {
  const OpState& op = *live.op;
  size_t first = live.nextChunk * live.chunkCount;
  ChunkSpec spec = chunkSpec(op, first, std::min(live.chunkCount, op.count - first));
  Slot& slot = lanes_.activate(l, live);
  makeChunk(slot, spec);
  scheduler_.chunkActivated(slot.priority);
  pump(slot);  // may finish the chunk, and erase the slot
}

void ChunkRunner::makeChunk(Slot& slot, const ChunkSpec& spec) {
  const OpState& op = *slot.live->op;
  if (LaneTable::isPointToPoint(slot.lane)) {
    slot.algo = std::make_unique<PointToPointChunk>(spec, op.peer, op.kind == OpState::Kind::kSend,
                                                    slot.chunkIndex == 0 ? headerBytes(op) : 0);
  } else if (slot.lane == kAgreeLane) {
    // Small ops whose algorithm is recursive doubling or halving-doubling are reduced by the
    // agreement itself.
    auto agreement = std::make_unique<AgreementChunk>(spec, agreeScratch_, OpMatcher::arguments(op),
                                                      carries(op), kCarryMaxBytes,
                                                      op.algorithm == priocclAlgoHalvingDoubling);
    slot.agreement = agreement.get();
    slot.algo = std::move(agreement);
  } else {
    makeDataChunk(slot, spec);
  }
}

void ChunkRunner::makeDataChunk(Slot& slot, const ChunkSpec& spec) {
  const OpState& op = *slot.live->op;
  switch (op.baseKind()) {
    case OpState::Kind::kBroadcast:
      slot.algo = std::make_unique<BroadcastChunk>(spec, op.root,
                                                   RootTree::shapeFor(slot.live->chunks, nranks_));
      return;
    case OpState::Kind::kReduce:
      slot.algo = std::make_unique<ReduceChunk>(spec, scratch_, op.root,
                                                RootTree::shapeFor(slot.live->chunks, nranks_));
      return;
    case OpState::Kind::kAllGather:
      slot.algo = std::make_unique<AllGatherChunk>(spec);
      return;
    case OpState::Kind::kReduceScatter:
      slot.algo = std::make_unique<ReduceScatterChunk>(spec, scratch_);
      return;
    case OpState::Kind::kAllToAll:
      slot.algo = std::make_unique<AllToAllChunk>(spec);
      return;
    default:  // all-reduce (point to point has its own lanes)
      slot.algo = algoEntry(op.algorithm).make(spec, scratch_);
  }
}

void ChunkRunner::pump(Slot& slot) {
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

ChunkRunner::Posted& ChunkRunner::postTransfer(uint32_t lane, uint64_t gid, const Transfer& t,
                                               bool isRecv, SendCompletion completion) {
  using Kind = Transfers::Kind;
  uint64_t cookie = transfers_.post(isRecv ? Kind::kDataRecv : Kind::kDataSend, t.peer,
                                    lanes_.tagOf(lane, gid, t.step), t.buf, t.bytes, completion);
  Posted& p = transfers_.at(cookie);
  p.lane = lane;
  p.exact = t.exact;
  p.gid = gid;
  p.step = t.step;
  if (!isRecv) stats_.sendPosted();
  return p;
}

void ChunkRunner::postData(Slot& slot, const Transfer& t, bool isRecv) {
  Posted& p = postTransfer(slot.lane, slot.gid, t, isRecv);
  if (isRecv) return;
  p.priority = slot.priority;
  scheduler_.sendPosted(slot.priority, t.bytes);
  // A preemption: the wire moves to a more urgent chunk while the one it served still has work.
  if (auto before = scheduler_.recordSend(slot.lane, slot.gid, slot.priority);
      before && lanes_.find(before->lane, before->gid))
    stats_.preempted();
}

void ChunkRunner::onData(const Posted& p, size_t bytes, Clock::time_point done) {
  bool inlineOp = isInline(p.lane, p.gid);
  if (!inlineOp) news_ = true;
  Slot* slot = inlineOp ? nullptr : lanes_.find(p.lane, p.gid);
  if (!inlineOp && !slot)
    fail(priocclInternalError, "completion for chunk ", p.gid, " that is not live");
  ChunkAlgo& algo = inlineOp ? *inline_.chunk : *slot->algo;
  OpState& op = inlineOp ? *inline_.op : *slot->live->op;
  bool isRecv = p.kind == Transfers::Kind::kDataRecv;
  if (isRecv && !p.exact) algo.recvLength(p.step, bytes);
  if (isRecv && p.exact && bytes != p.bytes)
    fail(priocclRemoteError, "rank ", p.peer, " sent ", bytes, " bytes where ", p.bytes,
         " were expected: ranks disagree on the count or datatype of an op, or submitted "
         "different ops");
  op.lastProgress = lanes_[p.lane].lastProgress = done;
  if (isRecv) {
    algo.recvDone(p.step);
  } else {
    if (!inlineOp && scheduler_.sendDone(p.priority, p.bytes, done)) creditChanged();
    algo.sendDone(p.step);
  }
  stats_.transferred(op, slot ? slot->chunkIndex : 0, p.step, p.bytes, isRecv, p.start, done);
  if (inlineOp)
    pumpInline();
  else
    pump(*slot);
}

// The scheduler: most urgent ready send first, while fewer than creditBytes are in flight.
bool ChunkRunner::postSends() {
  // Only a chunk with a send ready has anything to post, and every such chunk has an entry here.
  if (scheduler_.empty()) return false;
  bool any = false;
  // Each lane's oldest live chunk ignores the credit when the wire has stalled: see the deadlock
  // argument at the top of lane_table.h. Only then: a less urgent oldest chunk that always
  // bypassed the credit would keep the queue below the scheduler full ahead of urgent chunks.
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
    if (!scheduler_.mayPost(e.priority)) {  // the credit and fill rules
      scheduler_.creditHeld();
      break;
    }
    scheduler_.pop();
    slot.queued = false;
    postData(slot, slot.algo->takeSend(), false);
    any = true;
    pump(slot);
  }
  return any;
}

// Each new high at INFO (a handful per communicator: the credit doubles up to its bound); the
// rest, the sawtooth of a wire that stays busy, at TRACE.
void ChunkRunner::creditChanged() {
  const CreditTuner& c = scheduler_.credit();
  const bool high = c.credit() > highestCredit_;
  highestCredit_ = std::max(highestCredit_, c.credit());
  log(high ? LogLevel::kInfo : LogLevel::kTrace, "credit now ", c.credit(), " bytes (from ",
      c.base(), ", at most ", c.max(), "): sends ",
      high ? "waited for it while the link was underused" : "kept the link busy");
}

void ChunkRunner::finishChunk(Slot& slot) {
  scheduler_.chunkFinished(slot.priority);
  // An agreement ends its op's matching, not the op (unless it carried the data): its verdict
  // decides.
  bool agreement = slot.agreement != nullptr;
  if (agreement) events_.agreementDone(*slot.agreement, slot.live->op);
  const uint64_t chunk = slot.chunkIndex;
  LiveOp& live = lanes_.finish(slot);  // the slot is gone; a ready-heap entry of it is now stale
  stats_.chunkCompleted();
  const OpState& op = *live.op;
  if (!agreement && op.staging && op.sliced()) {  // this chunk's result may go back now
    const size_t elem = reduce::dtypeSize(op.dtype), first = chunk * live.chunkCount;
    op.staging->resultDone(first * elem,
                           (std::min(first + live.chunkCount, op.count) - first) * elem);
  }
  if (!agreement && live.finished()) events_.opEnded(*live.op);
}

void ChunkRunner::runInline(std::shared_ptr<OpState> op, const Announce& announce) {
  inline_.gid = lanes_.reserve(kAgreeLane);
  inline_.op = op;  // from here on clear() dooms it too
  inline_.chunk.emplace(chunkSpec(*op, 0, op->count), agreeScratch_, announce, true, kCarryMaxBytes,
                        op->algorithm == priocclAlgoHalvingDoubling);
  pumpInline();
}

void ChunkRunner::pumpInline() {
  AgreementChunk& chunk = *inline_.chunk;
  while (chunk.recvReady()) postTransfer(kAgreeLane, inline_.gid, chunk.takeRecv(), true);
  // Its sends bypass the credit, so they need not complete end to end (transport.h).
  while (chunk.sendReady())
    postTransfer(kAgreeLane, inline_.gid, chunk.takeSend(), false, SendCompletion::kBuffered);
  if (!chunk.finished()) return;
  std::shared_ptr<OpState> op = std::move(inline_.op);  // isInline() is false from here on
  stats_.chunkCompleted();
  events_.agreementDone(chunk, std::move(op));
  inline_.chunk.reset();
}

void ChunkRunner::clear(std::vector<std::shared_ptr<OpState>>& doomed) {
  scratch_.hold();
  agreeScratch_.hold();
  if (inline_.op) doomed.push_back(std::move(inline_.op));
  inline_.chunk.reset();  // its transfers are cancelled
  lanes_.clear(doomed);
  scheduler_.clear();
}

void ChunkRunner::endTraffic(bool transportQuiesced) {
  if (transportQuiesced || !scratch_.held()) return;  // (a clean end: nothing in flight)
  scratch_.abandon();
  agreeScratch_.abandon();
}

std::string ChunkRunner::waitingFor(const OpState& op) const {
  std::map<int, int> recvs, sends;  // peer -> transfers outstanding
  transfers_.forEachPosted([&](const Posted& p) {
    bool isRecv = p.kind == Transfers::Kind::kDataRecv;
    if (!isRecv && p.kind != Transfers::Kind::kDataSend) return;
    const Slot* slot = lanes_.find(p.lane, p.gid);
    const OpState* owner = isInline(p.lane, p.gid) ? inline_.op.get()
                           : slot                  ? slot->live->op.get()
                                                   : nullptr;
    if (owner == &op) ++(isRecv ? recvs : sends)[p.peer];
  });
  auto list = [](const std::map<int, int>& m) {
    std::string out;
    for (const auto& [peer, n] : m) out += concat(out.empty() ? "" : ", ", peer);
    return out;
  };
  std::string what;
  if (!recvs.empty()) what = concat("waiting for data from rank(s) ", list(recvs));
  if (!sends.empty())
    what += concat(what.empty() ? "" : "; ", "sends to rank(s) ", list(sends), " not taken");
  if (!what.empty()) return what;
  // An unnamed op joins the unnamed data lane once agreed, after the older unnamed ops.
  bool moving = false;
  for (const LiveOp& live : lanes_[kUnnamedLane].live) moving |= live.op.get() == &op;
  return !op.pointToPoint() && !op.named && !moving
             ? "waiting for its agreement with the other ranks or for older unnamed ops"
             : "waiting behind older ops on the same ranks";
}

}  // namespace prioccl::detail
