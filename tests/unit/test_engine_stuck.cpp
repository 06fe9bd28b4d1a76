// A transport call that never returns must not hang the threads waiting for its ops (issue 46,
// item 4: a survivor's progress thread stayed inside MPI_Testsome after its peer died). An engine
// over the in-memory fabric whose poll blocks on the progress thread until the test lets it go:
// the waiter fails with priocclTimeout naming the call, later ops fail at once, and stopping the
// engine says it cannot rather than waiting for the call.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/engine.h"
#include "fabric.h"

namespace {

using prioccl::detail::Engine;
using prioccl::detail::OpState;
using prioccl::test::Fabric;
using prioccl::test::FabricTransport;
using Clock = std::chrono::steady_clock;

// Blocks in poll() once armed, until released; counts the callers inside.
struct Latch {
  std::mutex mutex;
  std::condition_variable cv;
  bool armed = false, released = false;
  std::atomic<int> inside{0};
};

class BlockingTransport final : public prioccl::Transport {
 public:
  BlockingTransport(Fabric& fabric, int rank, int size, Latch& latch)
      : inner_(fabric, rank, size), latch_(latch) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* name() const override { return "blocking"; }
  const char* pollCall() const override { return "blocking_poll"; }
  uint64_t tagSpace() const override { return inner_.tagSpace(); }
  void postSend(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                prioccl::SendCompletion completion) override {
    inner_.postSend(peer, tag, buf, bytes, cookie, completion);
  }
  void postRecv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) override {
    inner_.postRecv(peer, tag, buf, bytes, cookie);
  }
  size_t poll(std::vector<prioccl::Completion>& out) override {
    {
      std::unique_lock<std::mutex> lock(latch_.mutex);
      if (latch_.armed && !latch_.released) {
        ++latch_.inside;
        latch_.cv.wait(lock, [&] { return latch_.released; });
        --latch_.inside;
      }
    }
    return inner_.poll(out);
  }
  size_t pending() const override { return inner_.pending(); }
  void cancelAll() override { inner_.cancelAll(); }

 private:
  FabricTransport inner_;
  Latch& latch_;
};

std::shared_ptr<OpState> allReduceOf(std::vector<float>& data) {
  auto op = std::make_shared<OpState>();
  op->send = op->recv = data.data();
  op->count = data.size();
  op->dtype = priocclFloat32;
  op->op = priocclSum;
  op->errorLog = std::make_shared<prioccl::detail::ErrorLog>();
  return op;
}

double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Rank 0 of two over the fabric, PRIOCCL_TIMEOUT_S=1; rank 1 never answers, so no op ends by
// itself.
struct StuckRank {
  Fabric fabric;
  Latch latch;
  std::unique_ptr<Engine> engine;

  explicit StuckRank(bool heartbeats) {
    prioccl::Config cfg;
    cfg.timeoutSeconds = 1;
    engine = std::make_unique<Engine>(std::make_unique<BlockingTransport>(fabric, 0, 2, latch), cfg,
                                      prioccl::AlgoSelector(priocclAlgoRing),
                                      std::make_shared<prioccl::detail::ErrorLog>(), heartbeats);
  }
  // A failed check leaves the call blocked: let it go, or the engine's destructor waits for it.
  ~StuckRank() {
    release();
    engine.reset();
  }
  void arm() {
    std::lock_guard<std::mutex> lock(latch.mutex);
    latch.armed = true;
  }
  // Until a thread is inside the blocked poll.
  bool awaitBlocked() {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (latch.inside.load() == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return latch.inside.load() == 1;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(latch.mutex);
      latch.released = true;
    }
    latch.cv.notify_all();
  }
};

TEST(EngineStuckCall, WaiterFailsNamingTheCallLaterOpsFailAtOnceStopDoesNotWait) {
  StuckRank rank(/*heartbeats=*/false);
  std::vector<float> a(4096, 1.0f), b(16, 1.0f);
  rank.arm();
  std::shared_ptr<OpState> op = allReduceOf(a);
  rank.engine->submit(op);  // the progress thread takes it, posts, and polls: it blocks there
  ASSERT_TRUE(rank.awaitBlocked()) << "the progress thread never polled";

  // The waiter drives progress: it finds the lock held by a round that does not end.
  auto t0 = Clock::now();
  prioccl::detail::driveUntilDone(*op);
  double waited = secondsSince(t0);
  ASSERT_TRUE(op->done.load());
  EXPECT_EQ(op->result, priocclTimeout) << op->error;
  EXPECT_NE(op->error.find("blocking_poll (blocking transport) has not returned"),
            std::string::npos)
      << op->error;
  EXPECT_NE(op->error.find("PRIOCCL_TIMEOUT_S=1"), std::string::npos) << op->error;
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 5.0);
  EXPECT_EQ(rank.engine->asyncError(), priocclTimeout);

  // A later op fails at once; stopping returns at once without the stuck thread.
  std::shared_ptr<OpState> later = allReduceOf(b);
  t0 = Clock::now();
  rank.engine->submit(later);
  EXPECT_TRUE(later->done.load());
  EXPECT_EQ(later->result, priocclTimeout);
  EXPECT_FALSE(rank.engine->drainAndStop());
  EXPECT_LT(secondsSince(t0), 1.0);
  EXPECT_EQ(rank.latch.inside.load(), 1);

  // Should the call return after all, the engine cleans up and stops as usual.
  rank.release();
  bool stopped = false;  // once the returned round has ended
  for (auto until = Clock::now() + std::chrono::seconds(30); !stopped && Clock::now() < until;)
    stopped = rank.engine->drainAndStop();
  EXPECT_TRUE(stopped);
  rank.engine.reset();
  EXPECT_EQ(op->result, priocclTimeout);  // the first result stays
}

// A stuck round declared from drainAndStop itself (no waiter asked first): it gives up after
// PRIOCCL_TIMEOUT_S and the op fails.
TEST(EngineStuckCall, StopGivesUpOnAStuckRound) {
  StuckRank rank(/*heartbeats=*/false);
  std::vector<float> a(4096, 1.0f);
  rank.arm();
  std::shared_ptr<OpState> op = allReduceOf(a);
  rank.engine->submit(op);
  ASSERT_TRUE(rank.awaitBlocked());
  auto t0 = Clock::now();
  EXPECT_FALSE(rank.engine->drainAndStop());
  double waited = secondsSince(t0);
  EXPECT_GE(waited, 0.9);
  EXPECT_LT(waited, 5.0);
  EXPECT_EQ(rank.engine->asyncError(), priocclTimeout);
  rank.release();
  rank.engine.reset();  // waits for the (now returned) call, cleans up
  ASSERT_TRUE(op->done.load());
  EXPECT_EQ(op->result, priocclTimeout) << op->error;
}

// The stuck thread is a waiter driving progress: nothing can bring it back, but the progress
// thread (awake for its heartbeats) fails the communicator, so that other threads' ops fail and
// the job can tell.
TEST(EngineStuckCall, ProgressThreadFailsTheCommunicatorBehindAStuckWaiter) {
  StuckRank rank(/*heartbeats=*/true);
  std::vector<float> a(16, 1.0f), b(16, 1.0f);
  std::shared_ptr<OpState> op = allReduceOf(a);
  std::thread waiter([&] {
    rank.arm();
    rank.engine->submit(op, /*callerWaits=*/true);
    prioccl::detail::driveUntilDone(*op);
  });
  ASSERT_TRUE(rank.awaitBlocked()) << "nobody polled";
  auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::seconds(30);
  while (rank.engine->asyncError() == priocclSuccess && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(rank.engine->asyncError(), priocclTimeout);
  EXPECT_LT(secondsSince(t0), 5.0);
  std::shared_ptr<OpState> later = allReduceOf(b);
  rank.engine->submit(later);
  EXPECT_TRUE(later->done.load());
  EXPECT_EQ(later->result, priocclTimeout);
  EXPECT_NE(later->error.find("blocking_poll (blocking transport) has not returned"),
            std::string::npos)
      << later->error;
  rank.release();
  waiter.join();
  EXPECT_EQ(op->result, priocclTimeout) << op->error;
  rank.engine.reset();
}

// The stuck thread is the progress thread, and no thread waits: the user polls its requests (as
// fault_rank's preemption phase does) or is busy elsewhere. Nothing takes the progress lock, so
// only the engine's own watch on its rounds can tell (once, in CI, a survivor stayed silent for
// a minute this way). Every op not ended fails with the call's name, and its callbacks run.
TEST(EngineStuckCall, NobodyWaitsTheEngineStillFailsEveryOpInFlight) {
  StuckRank rank(/*heartbeats=*/false);
  std::vector<float> a(4096, 1.0f), b(4096, 1.0f);
  std::shared_ptr<OpState> first = allReduceOf(a), second = allReduceOf(b);
  std::atomic<int> called{0};
  first->callbacks.push_back([&](priocclResult_t code, const std::string&) {
    if (code == priocclTimeout) ++called;
  });
  rank.engine->submit(first);
  // In the engine's lanes: its first sends are out (rank 1 never answers, so it stays there).
  for (auto until = Clock::now() + std::chrono::seconds(30);
       rank.engine->counters().sendsPosted == 0 && Clock::now() < until;)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GT(rank.engine->counters().sendsPosted, 0u) << "the engine never took the op";
  rank.arm();  // the progress thread's next poll blocks
  ASSERT_TRUE(rank.awaitBlocked()) << "the progress thread never polled";
  rank.engine->submit(second);  // queued behind the stuck round
  auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::seconds(30);
  while (!(first->done.load() && second->done.load()) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  double waited = secondsSince(t0);
  ASSERT_TRUE(first->done.load() && second->done.load()) << "no op failed within 30 s";
  EXPECT_LT(waited, 5.0);
  EXPECT_GE(waited, 0.5);
  for (const auto& op : {first, second}) {
    EXPECT_EQ(op->result, priocclTimeout) << op->error;
    EXPECT_NE(op->error.find("blocking_poll (blocking transport) has not returned"),
              std::string::npos)
        << op->error;
  }
  EXPECT_EQ(called.load(), 1);
  EXPECT_EQ(rank.engine->asyncError(), priocclTimeout);
  EXPECT_FALSE(rank.engine->drainAndStop());  // at once: declared already
  rank.release();
  rank.engine.reset();
}

}  // namespace
