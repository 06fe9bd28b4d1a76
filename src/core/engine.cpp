// Progress loop, chunk activation window and the priority/credit send scheduler.
//
// Deadlock freedom. Chunk identities (gids) follow submission order, which is the same on every
// rank. A rank keeps receives posted for every chunk in [oldest unfinished, oldest + window), and
// the oldest unfinished chunk may always post its sends, credit or not. The globally oldest
// unfinished chunk is therefore live with receives posted on every rank that still needs it, so it
// always completes, and by induction every chunk does. The same argument bounds every live gid to
// [global oldest, global oldest + 2 * window), which is why tags only need to be unique modulo
// 2 * window chunks.
#include "core/engine.h"

#include <algorithm>
#include <chrono>
#include <tuple>

#include "algo/ring.h"
#include "core/log.h"
#include "reduce/reduce.h"

namespace prioccl::detail {
namespace {

constexpr unsigned kSpinRounds = 64;   // yields before the first sleep while peers are behind
constexpr unsigned kMaxSleepUs = 256;  // longest nap between polls while ops are in flight

uint64_t bitsFor(uint64_t values) {
  uint64_t bits = 0;
  while ((uint64_t{1} << bits) < values) ++bits;
  return bits;
}

}  // namespace

bool Engine::ReadyEntry::operator>(const ReadyEntry& o) const {
  return std::tie(priority, seq, chunkIndex) > std::tie(o.priority, o.seq, o.chunkIndex);
}

Engine::Engine(std::unique_ptr<Transport> transport, const Config& config,
               std::shared_ptr<ErrorLog> errorLog)
    : transport_(std::move(transport)),
      config_(config),
      errorLog_(std::move(errorLog)),
      rank_(transport_->rank()),
      nranks_(transport_->size()),
      stepBits_(bitsFor(static_cast<uint64_t>(std::max(1, RingChunk::steps(nranks_))))),
      scratch_(RingChunk::scratchBytes(config.chunkBytes, transport_->size())) {
  uint64_t window = std::max<uint64_t>(1, config_.windowChunks);
  tagChunks_ = stepBits_ >= 64 ? 0 : transport_->tagSpace() >> stepBits_;
  if (tagChunks_ < 2)
    fail(priocclInternalError, "transport tag space too small for ", nranks_, " ranks");
  if (2 * window > tagChunks_) {
    window = tagChunks_ / 2;
    log(LogLevel::kWarn, "window limited to ", window, " chunks by the transport's tag space");
  }
  slots_.resize(window);
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  drainAndStop();
}

void Engine::submit(std::shared_ptr<OpState> op) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) fail(priocclInvalidUsage, "communicator is being destroyed");
    if (!failed_) {
      op->seq = nextSeq_++;
      incoming_.push_back(std::move(op));
      wake_.notify_one();
      return;
    }
  }
  op->finish(failCode_, failMessage_);  // a failed communicator fails every later op at once
}

void Engine::drainAndStop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

uint64_t Engine::tagOf(uint64_t gid, int step) const {
  return ((gid % tagChunks_) << stepBits_) | static_cast<uint64_t>(step);
}

bool Engine::idle() const {
  return live_.empty() && transport_->pending() == 0;
}

// One round of progress; a transport failure fails the communicator rather than the process.
bool Engine::step() {
  try {
    bool moved = takeSubmissions();
    moved |= activate();
    moved |= pollTransport();
    moved |= postSends();
    retireOps();
    return moved;
  } catch (const Error& e) {
    failAll(e.code(), e.what());
  } catch (const std::exception& e) {
    failAll(priocclInternalError, e.what());
  }
  return true;
}

void Engine::run() {
  unsigned quiet = 0;
  for (;;) {
    bool moved = step();
    if (moved) {
      quiet = 0;
      continue;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    if (!incoming_.empty()) continue;
    if (idle()) {
      if (stopping_) return;
      wake_.wait(lock, [&] { return !incoming_.empty() || stopping_; });
      continue;
    }
    // Peers are behind: poll with a growing nap so oversubscribed ranks get the cores.
    if (++quiet < kSpinRounds) {
      lock.unlock();
      std::this_thread::yield();
      continue;
    }
    unsigned us = std::min(kMaxSleepUs, 1u << std::min(quiet - kSpinRounds, 16u));
    wake_.wait_for(lock, std::chrono::microseconds(us));
  }
}

bool Engine::takeSubmissions() {
  std::vector<std::shared_ptr<OpState>> fresh;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (incoming_.empty()) return false;
    fresh.swap(incoming_);
  }
  for (auto& op : fresh) {
    if (op->count == 0) {
      op->finish(priocclSuccess, "");
      continue;
    }
    size_t perChunk = std::max<size_t>(1, config_.chunkBytes / reduce::dtypeSize(op->dtype));
    LiveOp live;
    live.chunks = (op->count + perChunk - 1) / perChunk;
    op->chunksLeft = live.chunks;
    live.op = std::move(op);
    live_.push_back(std::move(live));
  }
  return true;
}

bool Engine::activate() {
  bool any = false;
  while (activating_ < live_.size() && nextGid_ < oldestGid_ + slots_.size()) {
    LiveOp& live = live_[activating_];
    OpState& op = *live.op;
    size_t elem = reduce::dtypeSize(op.dtype);
    size_t perChunk = std::max<size_t>(1, config_.chunkBytes / elem);
    size_t first = live.nextChunk * perChunk;
    ChunkSpec spec;
    spec.send = static_cast<const unsigned char*>(op.send) + first * elem;
    spec.recv = static_cast<unsigned char*>(op.recv) + first * elem;
    spec.count = std::min(perChunk, op.count - first);
    spec.dtype = op.dtype;
    spec.op = op.op;
    spec.rank = rank_;
    spec.nranks = nranks_;
    Slot& slot = slotOf(nextGid_);
    slot.algo = std::make_unique<RingChunk>(spec, scratch_);
    slot.op = &op;
    slot.gid = nextGid_++;
    slot.chunkIndex = live.nextChunk++;
    slot.queued = false;
    if (live.nextChunk == live.chunks) ++activating_;
    pump(slot);
    any = true;
  }
  return any;
}

// Posts what a chunk can post without the scheduler (receives), queues its ready send, and
// retires it when done.
void Engine::pump(Slot& slot) {
  ChunkAlgo& algo = *slot.algo;
  while (algo.recvReady()) post(slot, algo.takeRecv(), true);
  if (algo.finished()) {
    finishChunk(slot);
    return;
  }
  if (algo.sendReady() && !slot.queued) {
    ready_.push({slot.op->priority, slot.op->seq, slot.chunkIndex, slot.gid});
    slot.queued = true;
  }
}

void Engine::post(Slot& slot, const Transfer& t, bool isRecv) {
  uint64_t cookie;
  if (freePosted_.empty()) {
    cookie = posted_.size();
    posted_.push_back({});
  } else {
    cookie = freePosted_.back();
    freePosted_.pop_back();
  }
  posted_[cookie] = {slot.gid, t.step, isRecv, t.bytes};
  uint64_t tag = tagOf(slot.gid, t.step);
  if (isRecv) {
    transport_->postRecv(t.peer, tag, t.buf, t.bytes, cookie);
  } else {
    inflightBytes_ += t.bytes;
    transport_->postSend(t.peer, tag, t.buf, t.bytes, cookie);
  }
}

bool Engine::pollTransport() {
  if (transport_->pending() == 0) return false;
  completions_.clear();
  transport_->poll(completions_);
  for (const Completion& c : completions_) {
    onCompletion(c);
    if (failed_) break;
  }
  return !completions_.empty();
}

void Engine::onCompletion(const Completion& c) {
  if (!c.ok) {
    failAll(c.code, c.error);
    return;
  }
  Posted p = posted_[c.cookie];
  freePosted_.push_back(c.cookie);
  Slot& slot = slotOf(p.gid);
  if (!slot.algo || slot.gid != p.gid) {
    failAll(priocclInternalError, concat("completion for chunk ", p.gid, " that is not live"));
    return;
  }
  if (p.isRecv) {
    slot.algo->recvDone(p.step);
  } else {
    inflightBytes_ -= p.bytes;
    slot.algo->sendDone(p.step);
  }
  pump(slot);
}

// The scheduler: most urgent ready send first, while fewer than creditBytes are in flight.
bool Engine::postSends() {
  bool any = false;
  // The oldest live chunk ignores the credit: see the deadlock argument at the top of this file.
  if (oldestGid_ < nextGid_) {
    Slot& oldest = slotOf(oldestGid_);
    while (oldest.algo && oldest.gid == oldestGid_ && oldest.algo->sendReady()) {
      post(oldest, oldest.algo->takeSend(), false);
      any = true;
      pump(oldest);
    }
  }
  while (!ready_.empty()) {
    const ReadyEntry e = ready_.top();
    Slot& slot = slotOf(e.gid);
    bool current = slot.algo && slot.gid == e.gid;
    if (!current || !slot.algo->sendReady()) {  // stale entry: posted through the oldest path
      ready_.pop();
      if (current) slot.queued = false;
      continue;
    }
    if (inflightBytes_ >= config_.creditBytes) break;
    ready_.pop();
    slot.queued = false;
    post(slot, slot.algo->takeSend(), false);
    any = true;
    pump(slot);
  }
  return any;
}

void Engine::finishChunk(Slot& slot) {
  OpState* op = slot.op;
  slot.algo.reset();
  slot.op = nullptr;
  slot.queued = false;  // any entry left in ready_ is now stale
  while (oldestGid_ < nextGid_ && !slotOf(oldestGid_).algo) ++oldestGid_;
  if (--op->chunksLeft == 0) op->finish(priocclSuccess, "");
}

void Engine::retireOps() {
  while (!live_.empty() && activating_ > 0 && live_.front().op->done.load()) {
    live_.pop_front();
    --activating_;
  }
}

void Engine::failAll(priocclResult_t code, const std::string& message) {
  std::string full = concat("rank ", rank_, ": ", message);
  log(LogLevel::kWarn, full);
  errorLog_->set(full);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_ = true;
    failCode_ = code;
    failMessage_ = full;
    for (auto& op : incoming_) live_.push_back({std::move(op), 0, 0});
    incoming_.clear();
  }
  transport_->cancelAll();
  for (Slot& slot : slots_) {
    slot.algo.reset();
    slot.op = nullptr;
  }
  ready_ = {};
  posted_.clear();
  freePosted_.clear();
  inflightBytes_ = 0;
  for (LiveOp& live : live_) {
    if (!live.op->done.load()) live.op->finish(code, full);
  }
  live_.clear();
  activating_ = 0;
  oldestGid_ = nextGid_;
}

}  // namespace prioccl::detail
