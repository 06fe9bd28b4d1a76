// The scheduler's rules on plain values (src/core/scheduler.h): ready order, credit, the fill
// rule, stalls and preemptions. test_scheduler.cpp checks the same rules end to end through two
// engines.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <tuple>
#include <vector>

#include "core/scheduler.h"
#include "prioccl/prioccl.hpp"

namespace {

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

}  // namespace
