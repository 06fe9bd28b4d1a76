#include "core/handover.h"

#include <algorithm>

#include "common/error.h"

namespace prioccl::detail {
namespace {

// Longest sleep on the transport's descriptor: the stall escape and timeouts need a poll now
// and then even when nothing arrives.
constexpr std::chrono::microseconds kEventSleep(1000);

}  // namespace

Handover::Handover(int eventFd, std::function<bool()> armEvents)
    : events_(eventFd), armEvents_(std::move(armEvents)) {}

bool Handover::push(OpPtr& op, bool callerWaits) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) fail(priocclInvalidUsage, "communicator is being destroyed");
  if (failed()) return false;
  track(op);
  incoming_.push_back(std::move(op));
  hasIncoming_.store(true, std::memory_order_relaxed);
  if (!callerWaits && drivers_ == 0) wakeProgress();  // a driver takes it itself
  return true;
}

bool Handover::admitInline(const OpPtr& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Ops queued by other threads come first: they were submitted before this one.
  if (stopping_ || failed() || !incoming_.empty()) return false;
  track(op);
  return true;
}

void Handover::track(const OpPtr& op) {
  live_.emplace_back(op);
  if (live_.size() < pruneAt_) return;
  live_.erase(std::remove_if(live_.begin(), live_.end(),
                             [](const std::weak_ptr<OpState>& w) {
                               OpPtr p = w.lock();
                               return !p || p->done.load(std::memory_order_acquire);
                             }),
              live_.end());
  pruneAt_ = std::max(kPruneMin, 2 * live_.size());
}

void Handover::collectLive(std::vector<OpPtr>& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::weak_ptr<OpState>& w : live_)
    if (OpPtr p = w.lock(); p && !p->done.load(std::memory_order_acquire)) out.push_back(p);
}

void Handover::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  stopping_ = true;
  wakeProgress();
}

void Handover::wakeAll() {
  events_.wake();  // sleeping drivers see their ops done
  std::lock_guard<std::mutex> lock(mutex_);
  wakeProgress();
}

void Handover::poke() {
  std::lock_guard<std::mutex> lock(mutex_);
  wakeProgress();
}

void Handover::driverEnters() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++drivers_;
}

void Handover::driverLeaves(bool idle) {
  // An idle engine's heartbeats need no wake-up: the progress thread waits at most one heartbeat
  // period. (Waking it after every op cost small ops half their speed when ranks share cores:
  // issue 19.)
  std::lock_guard<std::mutex> lock(mutex_);
  if (--drivers_ == 0 && (!idle || !incoming_.empty())) wakeProgress();
}

void Handover::driverNap(OpState& op, std::chrono::microseconds us) {
  if (events_.available()) {
    // Another driver may finish this op meanwhile: it pokes events_ then (opsEnded).
    sleepingDrivers_.fetch_add(1);
    if (!op.done.load(std::memory_order_acquire)) sleepOnEvents(kEventSleep);
    sleepingDrivers_.fetch_sub(1);
    return;
  }
  std::unique_lock<std::mutex> lock(op.mutex);
  op.cv.wait_for(lock, us, [&] { return op.done.load(std::memory_order_acquire); });
}

void Handover::opsEnded() {
  if (sleepingDrivers_.load() > 0) events_.wake();
}

bool Handover::take(std::vector<OpPtr>& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  hasIncoming_.store(false, std::memory_order_relaxed);
  if (incoming_.empty()) return false;
  out.swap(incoming_);
  return true;
}

bool Handover::rest(bool idle, Clock::duration heartbeat, Backoff& backoff, bool* fullRound) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!incoming_.empty()) return true;
  bool failedNow = failed();
  // Going to sleep: the round after it is a full one (the watchdog's).
  if (idle || failedNow || drivers_ > 0) *fullRound = true;
  bool beats = heartbeat != Clock::duration::zero();
  if (idle || failedNow) {
    if (stopping_) return false;
    auto news = [&] { return !incoming_.empty() || stopping_; };
    // Idle, but heartbeats keep going out. Failed, it still wakes as often: its abort notices
    // may wait for this rank's progress (a UCX endpoint that never carried anything is wired up
    // by an exchange both ends must progress), and a notice not delivered is a reason lost.
    if (!beats)
      wake_.wait(lock, news);
    else
      wake_.wait_for(lock, heartbeat, news);
    return true;
  }
  if (drivers_ > 0) {  // a driver runs the loop: stay off the cores until it leaves
    auto back = [&] { return drivers_ == 0 || stopping_; };
    if (beats)  // or until a heartbeat may be due: the engine may be idle by then
      wake_.wait_for(lock, heartbeat, back);
    else
      wake_.wait(lock, back);
    backoff.reset();
    return true;
  }
  backoff.pause([&](std::chrono::microseconds us) {
    *fullRound = true;  // after a nap, a full round
    if (!events_.available()) {
      wake_.wait_for(lock, us);
      return;
    }
    napping_ = true;  // from here on, submissions poke events_
    lock.unlock();
    sleepOnEvents(kEventSleep);
    lock.lock();
    napping_ = false;
  });
  return true;
}

void Handover::setFailed(priocclResult_t code, const std::string& message,
                         std::vector<OpPtr>& doomed) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failed()) {
    failCode_ = code;
    failMessage_ = message;
    failed_.store(true, std::memory_order_release);
  }
  doomed.swap(incoming_);
}

void Handover::wakeProgress() {
  wake_.notify_one();
  if (napping_) events_.wake();
}

// Sleeps until the transport has news, events_ is poked, or `limit` passes; no lock held.
void Handover::sleepOnEvents(std::chrono::microseconds limit) {
  if (armEvents_()) events_.sleep(limit);
}

}  // namespace prioccl::detail
