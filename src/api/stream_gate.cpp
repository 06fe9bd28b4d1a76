// Ops held until their streams' earlier work is done (stream_gate.h).
#include "api/stream_gate.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

#include "common/error.h"
#include "device/device_memory.h"

namespace prioccl::detail {

namespace {
// Whether the op has nothing left to wait for: its stream's earlier work, the op it comes after.
bool ready(const OpState& op) {
  return (!op.fence || op.fence->ready()) &&
         (!op.after || op.after->done.load(std::memory_order_acquire));
}

// Whether `later`, submitted after `ahead`, must wait while `ahead` waits. Ops are numbered for
// matching as they enter: unnamed ones in one sequence, named ones per key. So an unnamed op
// holds every later op, and a named one the later ops of its key; an op on a stream holds
// every later op (stream order). A named ragged op waiting for its own exchange of sizes lets
// the others pass: the exchange may need another rank to get past an op this rank submitted
// later (Horovod's test: a named op pending on one rank across a barrier).
bool holds(const OpState& ahead, const OpState& later) {
  return !ahead.named || ahead.fence != nullptr || (later.named && later.key == ahead.key);
}

// Whether `op` may pass every op in [begin, end) (none of them holds it).
template <typename It>
bool mayPass(It begin, It end, const OpState& op) {
  return std::none_of(begin, end, [&](const std::shared_ptr<OpState>& w) { return holds(*w, op); });
}

// The first waiting op that may go in now: ready, and held by no op before it.
template <typename Ops>
typename Ops::iterator firstAdmissible(Ops& waiting) {
  for (auto it = waiting.begin(); it != waiting.end(); ++it)
    if (ready(**it) && mayPass(waiting.begin(), it, **it)) return it;
  return waiting.end();
}
}  // namespace

void StreamGate::Bell::ring() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rung_ = true;
  }
  cv_.notify_all();
}

void StreamGate::Bell::nap(std::chrono::microseconds nap) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, nap, [&] { return rung_; });
  rung_ = false;
}

StreamGate::StreamGate(std::function<void(const std::shared_ptr<OpState>&)> handOver)
    : handOver_(std::move(handOver)) {}

StreamGate::~StreamGate() {
  failAll(priocclInvalidUsage,
          "the communicator was destroyed while the op waited to enter it (for the work queued "
          "on its stream before it, or for the sizes of a ragged op)");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  bell_->ring();
  if (thread_.joinable()) thread_.join();
}

bool StreamGate::admit(const std::shared_ptr<OpState>& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (mayPass(waiting_.begin(), waiting_.end(), *op) && ready(*op)) return true;
  waiting_.push_back(op);
  if (!thread_.joinable())
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "prioccl-gate");
      run();
    });
  cv_.notify_all();
  return false;
}

bool StreamGate::take(const std::shared_ptr<OpState>& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = firstAdmissible(waiting_);
  if (it == waiting_.end() || *it != op) return false;  // failed meanwhile
  waiting_.erase(it);
  cv_.notify_all();  // a drain may be waiting for this
  return true;
}

void StreamGate::run() {
  using std::chrono::microseconds;
  microseconds nap(10);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !waiting_.empty(); });
    if (stopping_) return;
    auto it = firstAdmissible(waiting_);
    std::shared_ptr<OpState> first = it == waiting_.end() ? nullptr : *it;
    lock.unlock();
    if (first) {
      handOver_(first);  // takes it (take()) under the communicator's lock, or fails it
      nap = microseconds(10);
    } else {
      bell_->nap(nap);
      nap = std::min(nap * 2, microseconds(200));
    }
    lock.lock();
  }
}

bool StreamGate::drain(std::chrono::steady_clock::duration limit) {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_for(lock, limit, [&] { return waiting_.empty(); });
}

void StreamGate::failAll(priocclResult_t code, const std::string& why) {
  std::deque<std::shared_ptr<OpState>> doomed;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    doomed.swap(waiting_);
  }
  cv_.notify_all();
  for (auto& op : doomed) op->finish(code, concat(kindName(op->kind), ": ", why));
}

}  // namespace prioccl::detail
