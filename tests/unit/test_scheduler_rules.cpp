// The scheduler's rules on plain values (src/core/scheduler.h): ready order, credit, the fill
// rule, stalls and preemptions. test_scheduler.cpp checks the same rules end to end through two
// engines.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <tuple>
#include <vector>

#include "core/credit_tuner.h"
#include "core/handover.h"
#include "core/scheduler.h"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::detail::CreditTuner;
using prioccl::detail::Scheduler;
using Clock = Scheduler::Clock;
using std::chrono::milliseconds;

TEST(SchedulerRules, ReadyGoesByPriorityThenGidThenLane) {
  Scheduler s(1 << 20);
  for (Scheduler::Ready r : {Scheduler::Ready{5, 10, 0}, Scheduler::Ready{1, 20, 2},
                             Scheduler::Ready{1, 15, 1}, Scheduler::Ready{1, 15, 0}})
    s.push(r);
  std::vector<std::tuple<int, uint64_t, uint32_t>> order;
  while (!s.empty()) {
    order.emplace_back(s.top().priority, s.top().gid, s.top().lane);
    s.pop();
  }
  const std::vector<std::tuple<int, uint64_t, uint32_t>> want = {
      {1, 15, 0}, {1, 15, 1}, {1, 20, 2}, {5, 10, 0}};
  EXPECT_EQ(order, want);
}

TEST(SchedulerRules, CreditHoldsSendsBackUntilOneCompletes) {
  Scheduler s(1000);
  s.chunkActivated(0);
  EXPECT_TRUE(s.mayPost(0));
  s.sendPosted(0, 999);
  EXPECT_TRUE(s.mayPost(0)) << "999 of 1000 credit bytes in flight";
  s.sendPosted(0, 1);
  EXPECT_FALSE(s.mayPost(0)) << "the credit is full";
  s.sendDone(0, 1, Clock::now());
  EXPECT_TRUE(s.mayPost(0));
}

TEST(SchedulerRules, LessUrgentBytesNeverHoldBackAnUrgentSend) {
  Scheduler s(1000);
  s.chunkActivated(0);
  s.chunkActivated(5);
  s.sendPosted(5, 5000);  // e.g. posted through the stall path, far past the credit
  EXPECT_TRUE(s.mayPost(0));
  EXPECT_FALSE(s.mayPost(5));
  s.sendPosted(0, 1000);
  EXPECT_FALSE(s.mayPost(0)) << "its own priority's bytes count";
  EXPECT_TRUE(s.mayPost(-1)) << "a more urgent chunk counts none of them";
}

TEST(SchedulerRules, LessUrgentChunksFillAQuarterWhileAnUrgentOneWaits) {
  Scheduler s(1000);
  s.chunkActivated(0);  // urgent, waiting on its peers: nothing of it in flight
  s.chunkActivated(3);
  ASSERT_EQ(Scheduler::kFillDivisor, 4u);
  s.sendPosted(3, 249);
  EXPECT_TRUE(s.mayPost(3));
  s.sendPosted(3, 1);
  EXPECT_FALSE(s.mayPost(3)) << "250 bytes = a quarter of the credit";
  s.chunkFinished(0);
  EXPECT_TRUE(s.mayPost(3)) << "no more urgent chunk: the whole credit";
}

TEST(SchedulerRules, AStallIsInFlightBytesWithNoCompletionForKStall) {
  Scheduler s(1000);
  EXPECT_FALSE(s.stalled(Clock::now() + 10 * Scheduler::kStall)) << "nothing in flight";
  s.sendPosted(0, 0);
  EXPECT_FALSE(s.stalled(Clock::now() + 10 * Scheduler::kStall)) << "an empty send is no bytes";
  const Clock::time_point before = Clock::now();
  s.sendPosted(0, 10);
  EXPECT_FALSE(s.stalled(before));
  EXPECT_TRUE(s.stalled(Clock::now() + 2 * Scheduler::kStall));
  // More sends do not restart the clock: it runs from the last completion (or the first send).
  std::this_thread::sleep_for(2 * Scheduler::kStall);
  s.sendPosted(0, 10);
  EXPECT_TRUE(s.stalled(Clock::now()));
  const Clock::time_point done = Clock::now();
  s.sendDone(0, 10, done);
  EXPECT_FALSE(s.stalled(done + Scheduler::kStall / 2)) << "a completion restarts it";
  EXPECT_TRUE(s.stalled(done + 2 * Scheduler::kStall));
  s.sendDone(0, 10, done);
  EXPECT_FALSE(s.stalled(done + 10 * Scheduler::kStall)) << "nothing left in flight";
}

TEST(SchedulerRules, APreemptionIsAMoreUrgentChunkTakingOverTheWire) {
  Scheduler s(1000);
  EXPECT_FALSE(s.recordSend(0, 10, 5)) << "first send";
  EXPECT_FALSE(s.recordSend(0, 10, 5)) << "same chunk again";
  auto before = s.recordSend(2, 11, 1);
  ASSERT_TRUE(before) << "a more urgent chunk after a less urgent one";
  EXPECT_EQ(before->lane, 0u);
  EXPECT_EQ(before->gid, 10u);
  EXPECT_EQ(before->priority, 5);
  EXPECT_FALSE(s.recordSend(0, 12, 3)) << "a less urgent chunk after a more urgent one";
  EXPECT_FALSE(s.recordSend(0, 13, 3)) << "equal priority: submission order, no preemption";
  s.clear();
  EXPECT_FALSE(s.recordSend(0, 14, 0)) << "nothing sent since clear()";
}

TEST(SchedulerRules, CompletingMoreThanWasPostedIsAnInternalError) {
  Scheduler s(1000);
  s.sendPosted(2, 100);
  EXPECT_THROW(s.sendDone(2, 101, Clock::now()), prioccl::InternalError);
  EXPECT_THROW(s.sendDone(1, 1, Clock::now()), prioccl::InternalError);
  EXPECT_THROW(s.chunkFinished(0), prioccl::InternalError);
}

// The credit tuner on a fake clock: a window is kWindow of busy wire; `bytes` complete in it.
struct Wire {
  CreditTuner& t;
  Clock::time_point now = Clock::time_point{} + std::chrono::seconds(1);
  // One window carrying `bytes`, with or without a send waiting for the credit. Returns whether
  // the credit changed at its end.
  bool window(size_t bytes, bool held) {
    if (held) t.held();
    now += CreditTuner::kWindow;
    return t.sendDone(bytes, now);
  }
};

constexpr double kLink = 100e6;                                             // bytes per second
constexpr size_t kFullWindow = 1000000;                                     // 100 MB/s for 10 ms
constexpr size_t kSlowWindow = kFullWindow / 2, kBusyWindow = kFullWindow;  // 50%, 100%

TEST(CreditTuner, DoublesUpToItsMaximumWhileItHoldsAnUnderusedWireBack) {
  CreditTuner t(64 << 10, 1 << 20, kLink);
  Wire w{t};
  t.wireStarted(w.now);
  std::vector<size_t> seen;
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(w.window(kSlowWindow, true), i < 4) << "window " << i;
    seen.push_back(t.credit());
  }
  const std::vector<size_t> want = {128 << 10, 256 << 10, 512 << 10, 1 << 20, 1 << 20, 1 << 20};
  EXPECT_EQ(seen, want);
}

TEST(CreditTuner, StaysWhenNoSendWaitedOrTheWireIsBusy) {
  CreditTuner t(64 << 10, 1 << 20, kLink);
  Wire w{t};
  t.wireStarted(w.now);
  EXPECT_FALSE(w.window(kSlowWindow, false)) << "slow, but nothing waited for the credit";
  EXPECT_FALSE(w.window(kBusyWindow, true)) << "a send waited, but the wire was busy";
  EXPECT_FALSE(w.window(size_t(0.8 * kFullWindow), true)) << "between the two thresholds";
  EXPECT_EQ(t.credit(), 64u << 10);
  // A completion before the window is over decides nothing yet.
  t.held();
  w.now += CreditTuner::kWindow / 2;
  EXPECT_FALSE(t.sendDone(1, w.now));
}

TEST(CreditTuner, HalvesBackAfterManyBusyWindowsNeverBelowItsBase) {
  CreditTuner t(64 << 10, 1 << 20, kLink);
  Wire w{t};
  t.wireStarted(w.now);
  for (int i = 0; i < 4; ++i) w.window(kSlowWindow, true);
  ASSERT_EQ(t.credit(), 1u << 20);
  for (int i = 1; i < CreditTuner::kBusyWindowsToShrink; ++i)
    ASSERT_FALSE(w.window(kBusyWindow, true)) << "busy window " << i;
  EXPECT_TRUE(w.window(kBusyWindow, true));
  EXPECT_EQ(t.credit(), 512u << 10);
  // A slow window in between starts the count again.
  for (int i = 1; i < CreditTuner::kBusyWindowsToShrink; ++i) w.window(kBusyWindow, true);
  EXPECT_TRUE(w.window(kSlowWindow, true)) << "underused again: doubles";
  EXPECT_EQ(t.credit(), 1u << 20);
  for (int round = 0; round < 10; ++round)
    for (int i = 0; i < CreditTuner::kBusyWindowsToShrink; ++i) w.window(kBusyWindow, true);
  EXPECT_EQ(t.credit(), 64u << 10) << "down to the base, not below";
}

TEST(CreditTuner, IdleTimeOpensNoWindow) {
  CreditTuner t(64 << 10, 1 << 20, kLink);
  Wire w{t};
  t.wireStarted(w.now);
  EXPECT_FALSE(w.window(kBusyWindow, false));
  // Nothing to send for a second, then a burst whose first window is busy: the idle second is
  // not counted against the wire.
  w.now += std::chrono::seconds(1);
  t.wireStarted(w.now);
  EXPECT_FALSE(w.window(kBusyWindow, true));
  EXPECT_EQ(t.credit(), 64u << 10);
}

TEST(CreditTuner, FixedWhenItsMaximumIsItsBaseOrTheLinkIsUnknown) {
  for (CreditTuner t :
       {CreditTuner(64 << 10, 64 << 10, kLink), CreditTuner(64 << 10, 32 << 10, kLink),
        CreditTuner(64 << 10, 1 << 20, 0)}) {
    Wire w{t};
    t.wireStarted(w.now);
    for (int i = 0; i < 8; ++i) EXPECT_FALSE(w.window(0, true));
    EXPECT_EQ(t.credit(), 64u << 10);
    EXPECT_EQ(t.max(), 64u << 10);
  }
}

TEST(SchedulerRules, TheTunedCreditIsTheOneSendsWaitFor) {
  Scheduler s(1000, 4000, kLink);
  s.chunkActivated(0);
  Clock::time_point now = Clock::now();
  s.sendPosted(0, 1000);
  EXPECT_FALSE(s.mayPost(0));
  s.creditHeld();
  // The wire moved 100 bytes in a window where a send waited: far below the link.
  EXPECT_TRUE(s.sendDone(0, 1000, now + CreditTuner::kWindow + std::chrono::milliseconds(1)));
  EXPECT_EQ(s.credit().credit(), 2000u);
  s.sendPosted(0, 1500);
  EXPECT_TRUE(s.mayPost(0)) << "1500 of 2000 credit bytes in flight";
}

}  // namespace

// The poll loop's back-off (core/handover.h). Fast links: 64 empty rounds before the first yield
// and no nap for kSpinTime. Slow links: the same until the wait is kSlowLinkSpin old; from then on
// every empty round naps kSlowLinkNap, but the first two after progress (reset); a new wait
// (start) spins again.
TEST(Backoff, SlowLinksNapAfterTheSpinFastLinksKeepSpinning) {
  using prioccl::detail::Backoff;
  using Clock = std::chrono::steady_clock;
  for (bool slow : {false, true}) {
    Backoff b(slow);
    Clock::time_point t0 = Clock::now();
    std::vector<std::chrono::microseconds> naps;
    std::vector<Clock::duration> napAt;  // since t0
    auto pause = [&] {
      b.pause([&](std::chrono::microseconds us) {
        naps.push_back(us);
        napAt.push_back(Clock::now() - t0);
      });
    };
    // The first 63 empty rounds never nap on a fast link, nor on a slow one before kSlowLinkSpin.
    for (int i = 0; i < 63; ++i) pause();
    if (!slow) {
      EXPECT_TRUE(naps.empty());
      continue;
    }
    for (Clock::duration d : napAt) EXPECT_GE(d, Backoff::kSlowLinkSpin);
    while (Clock::now() - t0 < Backoff::kSlowLinkSpin + std::chrono::microseconds(100)) pause();
    naps.clear();
    for (int i = 0; i < 9; ++i) pause();
    EXPECT_EQ(naps, std::vector<std::chrono::microseconds>(9, Backoff::kSlowLinkNap));
    b.reset();  // progress: two empty rounds again before the next nap
    naps.clear();
    pause();
    pause();
    EXPECT_TRUE(naps.empty());
    pause();
    EXPECT_EQ(naps.size(), 1u);
    b.start();  // a new wait: the spin again
    naps.clear();
    napAt.clear();
    t0 = Clock::now();
    for (int i = 0; i < 63; ++i) pause();
    for (Clock::duration d : napAt) EXPECT_GE(d, Backoff::kSlowLinkSpin);
  }
}
