// Who runs the progress loop, and how the other threads sleep (the hand-over described in
// engine.h): the queue of submitted ops, the threads driving progress in wait(), the progress
// thread's naps and what wakes them, and the communicator's failure as user threads see it.
// Everything here is guarded by one mutex (failed() is also readable without it).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/event_sleep.h"
#include "core/op.h"

namespace prioccl::detail {

// Polls while ops are in flight: yields for kSpinTime, then naps growing to kMaxSleepUs, so that
// oversubscribed ranks get the cores. The spin is timed, not counted: a round's cost differs
// by transport and by round (light or full). A transport with an event descriptor replaces the
// naps by sleeping on it. (Its spin is not shorter: measured on shared memory, UCX's wakeups
// after 64 rounds instead of 2000 cost half the busbw at 64 KiB-1 MiB.)
//
// On slow links (Config::slowLinks) a wait that has lasted kSlowLinkSpin polls only every
// kSlowLinkNap: completions come hundreds of microseconds apart there (a 32 KiB segment takes
// 0.26 ms at 1 Gbit/s), and every completion restarted the spin, so a rank spun in MPI_Testsome
// and sched_yield for as long as any op was in flight. Measured on ResNet-18 training, 4 hosts at
// 1 Gbit/s (docs/benchmarks.md, "Polling on slow links"): P3's CPU per step 369 -> 257 ms (gloo's
// 236), its step time unchanged. Short waits (small ops) end within the spin and keep its latency.
class Backoff {
 public:
  static constexpr std::chrono::microseconds kSlowLinkSpin{500};
  static constexpr std::chrono::microseconds kSlowLinkNap{50};

  // `roundsPerYield`: empty rounds between yields while spinning. 64 for a transport whose poll
  // yields by itself (Transport::pollYields), else 1: a spin that polls a socket 64 times before
  // it yields keeps a peer process that shares the core from answering. Measured on 4 ranks
  // sharing 2 cores, 1 Gbit/s testbed, tcp transport: ops of 64 B-4 KiB took 77-87 us with 64,
  // 62-74 with 1 (MPI transport 67-85; docs/benchmarks.md, "Spin yields").
  explicit Backoff(bool slowLinks = false, unsigned roundsPerYield = 64)
      : slowLinks_(slowLinks), roundsPerYield_(roundsPerYield ? roundsPerYield : 1) {}
  // How long a rank polls, yielding now and then, before it naps while peers are behind.
  // Measured on 4 ranks sharing 2 cores (priority_perf, median of 20 runs; 10 for 0.5 ms): the
  // urgent op's slowdown is 2.95 with 8 ms, 3.9 with 2 ms, 4.1 with 0.5 ms; small-op latency is
  // the same for all three.
  static constexpr std::chrono::milliseconds kSpinTime{8};
  static constexpr unsigned kMaxSleepUs = 256;  // longest nap between polls while ops are in flight

  void reset() { quiet_ = 0; }        // progress was made
  void start() { waiting_ = false; }  // a new wait begins (the engine was idle)
  // One round without progress.
  template <typename Nap>
  void pause(Nap nap) {
    if (slowLinks_) {
      auto now = std::chrono::steady_clock::now();
      if (!waiting_) {
        waiting_ = true;
        waitSince_ = now;
      }
      if (now - waitSince_ >= kSlowLinkSpin) {
        if (quiet_++ < 2) return;  // two empty rounds: whatever was ready has been taken
        nap(kSlowLinkNap);
        return;
      }
    }
    if (quiet_++ == 0) naps_ = 0;
    if (naps_ == 0) {
      if (quiet_ % roundsPerYield_ != 0) return;
      std::this_thread::yield();
      // One clock read per yield, and none for the many waits shorter than that.
      auto now = std::chrono::steady_clock::now();
      if (quiet_ == roundsPerYield_) since_ = now;
      if (now - since_ < kSpinTime) return;
    }
    nap(std::chrono::microseconds(std::min(kMaxSleepUs, 1u << std::min(naps_++, 16u))));
  }

 private:
  const bool slowLinks_;
  const unsigned roundsPerYield_;
  unsigned quiet_ = 0, naps_ = 0;
  std::chrono::steady_clock::time_point since_;
  bool waiting_ = false;  // slow links: waitSince_ marks this wait's first empty round
  std::chrono::steady_clock::time_point waitSince_;
};

class Handover {
 public:
  using Clock = std::chrono::steady_clock;
  using OpPtr = std::shared_ptr<OpState>;

  // `eventFd`: the transport's descriptor (< 0: none). `armEvents`: arms it for one sleep (under
  // the engine's progress lock; the transport takes one call at a time); false: not now.
  Handover(int eventFd, std::function<bool()> armEvents);

  // User threads. push() queues a submitted op, moving it out of `op` (false: the communicator
  // has failed, and `op` is left to the caller; throws once stopping). `callerWaits`: the caller
  // drives progress itself, so nobody is woken.
  bool push(OpPtr& op, bool callerWaits);
  // True: nothing queued ahead, not stopping, not failed; `op` may run inline (and is tracked
  // as live, as push() tracks the ops it queues).
  bool admitInline(const OpPtr& op);
  void stop();     // from now on push() throws; the progress thread returns once idle
  void wakeAll();  // after an abort: sleeping drivers and the progress thread look again
  void poke();     // something outside the engine changed (a staged op's input arrived)

  // Drivers: threads blocked in wait() that run the progress loop meanwhile.
  void driverEnters();
  // The last driver to leave wakes the progress thread, unless nothing is left for it (only new
  // submissions make an idle engine busy again, and they wake it themselves).
  void driverLeaves(bool idle);
  // A driver's nap of up to `us` while `op` is not done.
  void driverNap(OpState& op, std::chrono::microseconds us);
  void opsEnded();  // ops were finished: drivers asleep on the descriptor look again

  // The progress thread.
  bool hasIncoming() const { return hasIncoming_.load(std::memory_order_relaxed); }
  bool take(std::vector<OpPtr>& out);  // the queued ops into `out` (empty); false: none
  // Between rounds that moved nothing: sleeps while the engine is idle or failed (at most
  // `heartbeat` when heartbeats are on; zero: off), stays off the cores while a driver runs the
  // loop, else backs off. Sets *fullRound when the next round must be a full one. False: stop.
  bool rest(bool idle, Clock::duration heartbeat, Backoff& backoff, bool* fullRound);

  // The failure. The first one is what later submissions get; queued ops go to `doomed`.
  void setFailed(priocclResult_t code, const std::string& message, std::vector<OpPtr>& doomed);
  // Appends every op submitted and not ended yet, wherever it is: for a failure declared without
  // the progress lock (Engine::failStuck), whose stuck holder keeps the engine's own lists.
  void collectLive(std::vector<OpPtr>& out);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  priocclResult_t failCode() const { return failCode_; }  // once failed()
  const std::string& failMessage() const { return failMessage_; }

 private:
  void wakeProgress();  // under mutex_
  void sleepOnEvents(std::chrono::microseconds limit);

  std::mutex mutex_;
  std::condition_variable wake_;
  EventSleep events_;  // sleeping on the transport's descriptor, when it has one
  const std::function<bool()> armEvents_;
  std::vector<OpPtr> incoming_;
  void track(const OpPtr& op);  // under mutex_
  // Every op pushed or admitted inline, weakly (the engine owns them): pruned of ended ones
  // whenever it reaches pruneAt_, twice what the last pruning left, so the cost per op is flat.
  std::vector<std::weak_ptr<OpState>> live_;
  size_t pruneAt_ = kPruneMin;
  static constexpr size_t kPruneMin = 64;
  std::atomic<bool> hasIncoming_{false};  // incoming_ is not empty (read without mutex_)
  int drivers_ = 0;       // waiters driving progress now; the progress thread sleeps meanwhile
  bool napping_ = false;  // the progress thread sleeps in events_: wakeProgress() must poke it
  std::atomic<int> sleepingDrivers_{0};  // drivers asleep in events_: ending ops poke it
  bool stopping_ = false;
  // Written once, before failed_ (release), under mutex_.
  priocclResult_t failCode_ = priocclSuccess;
  std::string failMessage_;
  std::atomic<bool> failed_{false};
};

}  // namespace prioccl::detail
