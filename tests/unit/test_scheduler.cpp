// The scheduler, proven without luck: two engines in one process over an in-memory fabric that
// moves one message at a time only when the test says so. Every data message delivered on each
// link is recorded, so the test sees exactly when the wire went to which op.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/engine.h"
#include "fabric.h"

namespace {

using prioccl::detail::Engine;
using prioccl::detail::OpState;
using prioccl::test::Fabric;
using prioccl::test::FabricTransport;
using prioccl::test::kTagSpace;

std::shared_ptr<OpState> makeOp(std::vector<float>& data, int priority) {
  auto op = std::make_shared<OpState>();
  op->send = data.data();
  op->recv = data.data();
  op->count = data.size();
  op->dtype = priocclFloat32;
  op->op = priocclSum;
  op->priority = priority;
  op->errorLog = std::make_shared<prioccl::detail::ErrorLog>();
  return op;
}

// One engine per rank over `fabric`, all running the ring.
// Ranks stop together, as separate processes would, with the fabric delivering meanwhile:
// each waits for the others' goodbyes.
void drainAll(Fabric& fabric, std::vector<std::unique_ptr<Engine>>& engines) {
  std::atomic<size_t> stopped{0};
  std::vector<std::thread> threads;
  for (auto& e : engines)
    threads.emplace_back([&e, &stopped] {
      e->drainAndStop();
      ++stopped;
    });
  while (stopped < engines.size()) {
    fabric.deliver(true);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  for (std::thread& t : threads) t.join();
}

std::vector<std::unique_ptr<Engine>> ringEngines(Fabric& fabric, const prioccl::Config& cfg,
                                                 int ranks) {
  std::vector<std::unique_ptr<Engine>> engines;
  for (int r = 0; r < ranks; ++r)
    engines.push_back(std::make_unique<Engine>(std::make_unique<FabricTransport>(fabric, r, ranks),
                                               cfg, prioccl::AlgoSelector(priocclAlgoRing),
                                               std::make_shared<prioccl::detail::ErrorLog>()));
  return engines;
}

// Moves messages until `until` holds; after each delivery, waits until every engine has handled
// it (Fabric::settle), so that no engine falls behind the fabric however it is scheduled.
template <typename Pred>
void run(Fabric& fabric, Pred until) {
  for (int i = 0; i < 100000 && !until(); ++i) {
    int moved = 0;
    for (int n; (n = fabric.deliver(false)) > 0; moved += n) ASSERT_TRUE(fabric.settle());
    moved += fabric.deliver(true);
    ASSERT_TRUE(fabric.settle()) << "an engine did not handle a delivery within 60 s";
    // Nothing moved: the engines wait on their clocks (the 2 ms stall rule): let time pass.
    if (moved == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(until()) << "the fabric stalled";
}

// Waits until every engine has taken the ops just submitted: each has queued a send of their
// agreements (lane 1: nothing is delivered meanwhile).
void awaitAgreementSends(Fabric& fabric, const std::vector<std::unique_ptr<Engine>>& engines,
                         int ranks) {
  auto queuedAgreement = [&](int src) {
    for (int dst = 0; dst < ranks; ++dst)
      for (uint64_t tag : fabric.queued(src, dst)) {
        int lane = -1;
        engines[0]->chunkOfTag(tag, &lane);
        if (lane == 1) return true;
      }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int r = 0; r < ranks; ++r)
    while (!queuedAgreement(r)) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "rank " << r << " announced nothing";
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

// Low-priority data messages rank 1 received between the urgent op's activation and its last
// message, under the given schedule. The low op has 64 chunks; `window` chunks per lane are
// activated in lane order.
int lowMessagesWhileUrgentRuns(priocclSchedule_t schedule, size_t window = 1024) {
  const int kRanks = 2;
  prioccl::Config cfg;
  cfg.timeoutSeconds = 0;     // no heartbeats: the fabric's log holds only the ops' own messages
  cfg.chunkBytes = 64 << 10;  // 32 KiB ring segments on 2 ranks
  cfg.creditBytes = 64 << 10;
  cfg.windowChunks = window;
  cfg.schedule = schedule;
  Fabric fabric;
  std::vector<std::unique_ptr<Engine>> engines = ringEngines(fabric, cfg, kRanks);
  std::vector<std::vector<float>> low(kRanks,
                                      std::vector<float>(1 << 20, 1.0f));  // 4 MiB, 64 chunks
  std::vector<std::vector<float>> urgent(kRanks, std::vector<float>(1 << 14, 2.0f));  // 64 KiB
  std::vector<std::shared_ptr<OpState>> lowOps, urgentOps;
  for (int r = 0; r < kRanks; ++r) lowOps.push_back(makeOp(low[r], 100));
  for (int r = 0; r < kRanks; ++r) engines[r]->submit(lowOps[r]);
  run(fabric, [&] { return fabric.log(1).size() >= 20; });  // the low op is well under way
  for (int r = 0; r < kRanks; ++r) urgentOps.push_back(makeOp(urgent[r], 0));
  for (int r = 0; r < kRanks; ++r) engines[r]->submit(urgentOps[r]);
  awaitAgreementSends(fabric, engines, kRanks);  // the engines announce it
  size_t before = fabric.log(1).size();
  run(fabric, [&] { return urgentOps[0]->done.load() && urgentOps[1]->done.load(); });
  run(fabric, [&] { return lowOps[0]->done.load() && lowOps[1]->done.load(); });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(lowOps[r]->result, priocclSuccess);
    EXPECT_EQ(urgentOps[r]->result, priocclSuccess);
    EXPECT_EQ(low[r][12345], 2.0f);
    EXPECT_EQ(urgent[r][999], 4.0f);
  }
  // Data chunk identities of unnamed ops follow submission order: the low op's 64 chunks, then
  // the urgent op's (the agreements that precede each op's data travel in another lane).
  std::vector<Fabric::Delivered> log = fabric.log(1);
  auto dataChunk = [&](uint64_t tag) -> long long {
    int lane = 0;
    uint64_t chunk = engines[0]->chunkOfTag(tag, &lane);
    return lane == 2 ? static_cast<long long>(chunk) : -1;
  };
  size_t lastUrgent = before;
  for (size_t i = before; i < log.size(); ++i)
    if (dataChunk(log[i].tag) >= 64) lastUrgent = i;
  int lowCount = 0;
  for (size_t i = before; i < lastUrgent; ++i) {
    long long c = dataChunk(log[i].tag);
    if (c >= 0 && c < 64) ++lowCount;
  }
  drainAll(fabric, engines);
  return lowCount;
}

TEST(Scheduler, UrgentOpTakesTheWireFromARunningLowPriorityOp) {
  // Priority: once matched, the urgent op's 64 KiB goes out after at most the low-priority bytes
  // already in flight (the 64 KiB credit: 2 messages) plus one fill-in per step boundary where
  // its next send waits on the peer (2 ring steps): at most 4. FIFO: it waits for (nearly) all
  // of the 4 MiB op's remaining messages.
  int withPriority = lowMessagesWhileUrgentRuns(priocclSchedulePriority);
  int withFifo = lowMessagesWhileUrgentRuns(priocclScheduleFifo);
  std::printf(
      "low-priority messages on the wire while the urgent op ran: %d (priority), %d (fifo)\n",
      withPriority, withFifo);
  EXPECT_LE(withPriority, 4);
  EXPECT_GE(withFifo, 40);
}

TEST(Scheduler, UrgentOpOvertakesMoreThanAWindowOfLessUrgentChunks) {
  // The priority horizon is not the window: with 16 chunks per lane activated in lane order and
  // the low op's 64 chunks submitted first, the urgent op's chunks (identities 64 and up) still
  // go out at once, not after the low op's first 48 chunks.
  int withPriority = lowMessagesWhileUrgentRuns(priocclSchedulePriority, 16);
  int withFifo = lowMessagesWhileUrgentRuns(priocclScheduleFifo, 16);
  std::printf(
      "window 16: low-priority messages on the wire while the urgent op ran: %d (priority), %d "
      "(fifo)\n",
      withPriority, withFifo);
  EXPECT_LE(withPriority, 4);
  EXPECT_GE(withFifo, 40);
}

// Ranks that give one op different priorities schedule it differently, but every chunk has the
// same identity everywhere: nothing hangs, and every rank ends with the same bits.
TEST(Scheduler, RanksWithDifferentPrioritiesForOneOpAgreeOnBits) {
  const int kRanks = 3, kOps = 4;
  prioccl::Config cfg;
  cfg.timeoutSeconds = 0;
  cfg.chunkBytes = 48 << 10;  // 16 chunks per op
  cfg.creditBytes = 48 << 10;
  cfg.windowChunks = 4;  // most chunks are activated by priority, in a different order per rank
  Fabric fabric;
  std::vector<std::unique_ptr<Engine>> engines = ringEngines(fabric, cfg, kRanks);
  const size_t kCount = 16 * (48 << 10) / sizeof(float);
  std::vector<std::vector<std::vector<float>>> data(kRanks);  // [rank][op]
  std::vector<std::shared_ptr<OpState>> ops;
  for (int r = 0; r < kRanks; ++r)
    for (int k = 0; k < kOps; ++k) {
      std::vector<float>& v = data[r].emplace_back(kCount);
      for (size_t i = 0; i < kCount; ++i)
        v[i] = 1.0f / static_cast<float>(1 + (i * 7 + static_cast<size_t>(r * 13 + k)) % 97);
    }
  std::vector<std::vector<double>> expected(kOps, std::vector<double>(kCount, 0.0));
  for (int k = 0; k < kOps; ++k)
    for (int r = 0; r < kRanks; ++r)
      for (size_t i = 0; i < kCount; ++i) expected[k][i] += data[r][k][i];
  // Rank r ranks op k at ((k + r) % kOps) * 10: every rank has a different most urgent op.
  for (int r = 0; r < kRanks; ++r)
    for (int k = 0; k < kOps; ++k) {
      ops.push_back(makeOp(data[r][k], ((k + r) % kOps) * 10));
      engines[r]->submit(ops.back());
    }
  run(fabric, [&] {
    for (auto& op : ops)
      if (!op->done.load()) return false;
    return true;
  });
  for (auto& op : ops) EXPECT_EQ(op->result, priocclSuccess) << op->error;
  for (int k = 0; k < kOps; ++k) {
    for (int r = 1; r < kRanks; ++r)
      EXPECT_EQ(std::memcmp(data[r][k].data(), data[0][k].data(), kCount * sizeof(float)), 0)
          << "rank " << r << " disagrees with rank 0 on op " << k;
    for (size_t i = 0; i < kCount; i += 101)
      EXPECT_NEAR(data[0][k][i], expected[k][i], 1e-6 * expected[k][i]) << "op " << k;
  }
  drainAll(fabric, engines);
}

TEST(Scheduler, UrgentSendIsNotHeldBackByLessUrgentBytesInFlight) {
  // The low op fills the credit with sends the fabric does not deliver. Two more urgent ops'
  // sends must still be posted: only bytes in flight at their priority or more urgent count
  // against them. (Two, because once the wire has stalled for 2 ms each lane's oldest chunk may
  // send regardless, the deadlock escape: the second op can only go out by this rule.)
  const int kRanks = 2;
  prioccl::Config cfg;
  cfg.timeoutSeconds = 0;  // no heartbeats: the fabric's log holds only the ops' own messages
  cfg.chunkBytes = 64 << 10;
  cfg.creditBytes = 64 << 10;
  cfg.windowChunks = 1024;
  Fabric fabric;
  std::vector<std::unique_ptr<Engine>> engines = ringEngines(fabric, cfg, kRanks);
  std::vector<std::vector<float>> low(kRanks, std::vector<float>(1 << 20, 1.0f));
  std::vector<std::vector<float>> urgent(2 * kRanks, std::vector<float>(1 << 14, 2.0f));
  std::vector<std::shared_ptr<OpState>> lowOps, urgentOps;
  for (int r = 0; r < kRanks; ++r) lowOps.push_back(makeOp(low[r], 100));
  for (int r = 0; r < kRanks; ++r) engines[r]->submit(lowOps[r]);
  run(fabric, [&] { return fabric.log(1).size() >= 10; });
  // From here only control messages move: the low op's in-flight sends stay in flight.
  auto lanesQueued = [&](int lane) {
    int n = 0;
    for (uint64_t tag : fabric.queued(0, 1)) {
      int l = -1;
      engines[0]->chunkOfTag(tag, &l);
      n += l == lane;
    }
    return n;
  };
  // The progress threads may still be filling the credit, and once the wire has stalled for
  // Scheduler::kStall (2 ms) each lane's oldest chunk may send regardless, which a full round of
  // the engine checks (every 16th round, and the first after a nap). The low sends are all out
  // once the queue has held still while every engine ran 2 x 16 rounds (Fabric::asks) that began
  // at least 3 ms into the stillness: counted in rounds, not time, so that an engine descheduled
  // meanwhile is waited for.
  using Clock = std::chrono::steady_clock;
  int lowQueued = lanesQueued(2);
  {
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
    Clock::time_point stillSince = Clock::now();
    std::vector<uint64_t> asksAt;  // each engine's rounds once 3 ms of stillness had passed
    for (;;) {
      ASSERT_LT(Clock::now(), deadline) << "the low op's sends never held still";
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (int now = lanesQueued(2); now != lowQueued) {
        lowQueued = now;
        stillSince = Clock::now();
        asksAt.clear();
        continue;
      }
      if (asksAt.empty()) {
        if (Clock::now() - stillSince >= std::chrono::milliseconds(3))
          for (int r = 0; r < kRanks; ++r) asksAt.push_back(fabric.asks(r));
        continue;
      }
      bool enough = true;
      for (int r = 0; r < kRanks; ++r) enough = enough && fabric.asks(r) >= asksAt[r] + 2 * 16;
      if (enough) break;
    }
  }
  for (int i = 0; i < 2 * kRanks; ++i) urgentOps.push_back(makeOp(urgent[i], 0));
  for (int i = 0; i < 2 * kRanks; ++i) engines[i % kRanks]->submit(urgentOps[i]);
  // Both urgent ops' agreements (lane 1) go out although the credit is full of low sends.
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  while (lanesQueued(1) < 2 && Clock::now() < deadline) {
    fabric.deliver(false);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GE(lowQueued, 1) << "the low op should have sends in flight";
  EXPECT_EQ(lanesQueued(2), lowQueued) << "no new low send while the credit is full";
  EXPECT_EQ(lanesQueued(1), 2) << "an urgent op's send waited for less urgent bytes";
  auto allDone = [&] {
    for (auto& op : urgentOps)
      if (!op->done.load()) return false;
    return lowOps[0]->done.load() && lowOps[1]->done.load();
  };
  run(fabric, allDone);
  for (int i = 0; i < 2 * kRanks; ++i) {
    EXPECT_EQ(urgentOps[i]->result, priocclSuccess);
    EXPECT_EQ(urgent[i][999], 4.0f);
  }
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(low[r][12345], 2.0f);
  drainAll(fabric, engines);
}

}  // namespace
