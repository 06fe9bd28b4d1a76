// The collective runner (src/core/collective_runner.h) over a fake backend that records launches:
// the coordinator plans the most urgent chunk first, only kPlanAhead launches ahead of its own
// completions, so an urgent op decided mid-way goes before the rest of a bulk op; a follower that
// gets the plan launches exactly the same sequence; FIFO keeps decision order; in-place
// reduce-scatters launch from a copy; a plan that disagrees with this rank's cut is an error.
#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "core/collective_runner.h"

namespace {

using prioccl::CollBackend;
using prioccl::CollKind;
using prioccl::CollLaunch;
using prioccl::Completion;
using prioccl::Config;
using prioccl::detail::CollectiveRunner;
using prioccl::detail::LaunchEntry;
using prioccl::detail::OpState;

class FakeBackend : public CollBackend {
 public:
  const char* name() const override { return "fake"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void launch(const CollLaunch& c, uint64_t cookie) override { launched.push_back({c, cookie}); }
  size_t poll(std::vector<Completion>& out) override {
    size_t n = 0;
    for (uint64_t cookie : ready) {
      Completion c;
      c.cookie = cookie;
      out.push_back(c);
      ++n;
    }
    finished += ready.size();
    ready.clear();
    return n;
  }
  size_t pending() const override { return launched.size() - finished; }
  void abandon() override {}
  // Completes the oldest launch not yet completed.
  void completeNext() { ready.push_back(launched[finished + ready.size()].second); }

  std::vector<std::pair<CollLaunch, uint64_t>> launched;
  std::vector<uint64_t> ready;
  size_t finished = 0;
};

struct Done : CollectiveRunner::Events {
  void opEnded(OpState& op) override { done.push_back(op.globalSeq); }
  std::vector<uint64_t> done;
};

struct Rank {
  explicit Rank(bool coordinator, priocclSchedule_t schedule = priocclSchedulePriority)
      : config(makeConfig(schedule)),
        stats("", 0, 2, {}),
        runner(backend, config, coordinator, stats, events) {}
  static Config makeConfig(priocclSchedule_t schedule) {
    Config c;
    c.chunkBytes = 16;  // four floats per launch
    c.schedule = schedule;
    return c;
  }
  FakeBackend backend;
  Config config;
  prioccl::detail::OpStats stats;
  Done events;
  CollectiveRunner runner;
};

std::shared_ptr<OpState> allReduce(std::vector<float>& buf, uint64_t seq, int priority) {
  auto op = std::make_shared<OpState>();
  op->send = op->recv = buf.data();
  op->count = buf.size();
  op->dtype = priocclFloat32;
  op->priority = priority;
  op->globalSeq = seq;
  return op;
}

// (op, chunk) of each launch, recovered from its buffer offset.
std::vector<std::pair<int, size_t>> order(const FakeBackend& b,
                                          const std::vector<std::vector<float>*>& bufs) {
  std::vector<std::pair<int, size_t>> out;
  for (const auto& l : b.launched)
    for (size_t i = 0; i < bufs.size(); ++i) {
      const float* p = static_cast<const float*>(l.first.send);
      const float* begin = bufs[i]->data();
      if (p >= begin && p < begin + bufs[i]->size())
        out.push_back({static_cast<int>(i), static_cast<size_t>(p - begin) / 4});
    }
  return out;
}

TEST(CollectiveRunner, UrgentOpsGoBetweenLaunchesInOneOrderEverywhere) {
  Rank coord(true), other(false);
  std::vector<float> bulkC(40), bulkO(40), urgentC(8), urgentO(8);
  coord.runner.add(allReduce(bulkC, 0, 5));
  other.runner.add(allReduce(bulkO, 0, 5));
  EXPECT_EQ(coord.runner.chunksOf(*allReduce(bulkC, 0, 5)), 10u);
  auto step = [&] {  // one round: plan, pass the plan on, launch everywhere
    std::vector<LaunchEntry> plan = coord.runner.plan();
    other.runner.follow(plan);
    coord.runner.launch();
    other.runner.launch();
    return plan.size();
  };
  EXPECT_EQ(step(), CollectiveRunner::kPlanAhead) << "the plan runs only a little ahead";
  EXPECT_EQ(coord.backend.launched.size(), 2u);
  EXPECT_EQ(step(), 0u) << "nothing more until a launch completes";
  // The urgent op is decided now.
  coord.runner.add(allReduce(urgentC, 1, 0));
  other.runner.add(allReduce(urgentO, 1, 0));
  auto now = CollectiveRunner::Clock::now();
  while (!coord.runner.empty() || !other.runner.empty()) {
    if (coord.backend.pending()) coord.backend.completeNext();
    if (other.backend.pending()) other.backend.completeNext();
    coord.runner.poll(now);
    other.runner.poll(now);
    step();
  }
  auto seqC = order(coord.backend, {&bulkC, &urgentC});
  auto seqO = order(other.backend, {&bulkO, &urgentO});
  ASSERT_EQ(seqC.size(), 12u);
  EXPECT_EQ(seqC, seqO) << "every rank launches the same sequence";
  // Two bulk launches were planned before the urgent op; its two go next, then the bulk's rest.
  std::vector<std::pair<int, size_t>> want = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
  for (size_t c = 2; c < 10; ++c) want.push_back({0, c});
  EXPECT_EQ(seqC, want);
  EXPECT_EQ(coord.events.done, (std::vector<uint64_t>{1, 0}));
  EXPECT_EQ(other.events.done, (std::vector<uint64_t>{1, 0}));
}

TEST(CollectiveRunner, FifoKeepsTheDecisionOrder) {
  Rank coord(true, priocclScheduleFifo);
  std::vector<float> bulk(40), urgent(8);
  coord.runner.add(allReduce(bulk, 0, 5));
  coord.runner.add(allReduce(urgent, 1, 0));
  auto now = CollectiveRunner::Clock::now();
  while (!coord.runner.empty()) {
    coord.runner.plan();
    coord.runner.launch();
    if (coord.backend.pending()) coord.backend.completeNext();
    coord.runner.poll(now);
  }
  auto seq = order(coord.backend, {&bulk, &urgent});
  ASSERT_EQ(seq.size(), 12u);
  EXPECT_EQ(seq[9], (std::pair<int, size_t>{0, 9}));
  EXPECT_EQ(seq[10].first, 1) << "the urgent op waits for the whole bulk op";
}

TEST(CollectiveRunner, InPlaceReduceScatterLaunchesFromACopy) {
  Rank coord(true);
  std::vector<float> buf(8, 1.0f);  // two ranks' blocks of 4
  auto op = allReduce(buf, 0, 0);
  op->kind = OpState::Kind::kReduceScatter;
  op->count = 4;
  op->recv = buf.data() + 4;  // rank 0 of the fake is rank 0: its block would be buf[0..4)
  coord.runner.add(op);
  coord.runner.plan();
  coord.runner.launch();
  ASSERT_EQ(coord.backend.launched.size(), 1u) << "a blocked kind launches whole";
  const CollLaunch& l = coord.backend.launched[0].first;
  EXPECT_EQ(l.kind, CollKind::kReduceScatter);
  EXPECT_NE(l.send, static_cast<const void*>(buf.data())) << "recvbuf lies inside sendbuf";
  EXPECT_EQ(static_cast<const float*>(l.send)[7], 1.0f);
}

TEST(CollectiveRunner, APlanThatDisagreesWithThisRanksCutIsAnError) {
  Rank other(false);
  std::vector<float> buf(40);
  other.runner.add(allReduce(buf, 0, 0));
  LaunchEntry e;
  e.op = 0;
  e.chunk = 0;
  e.chunks = 3;  // this rank cuts it into 10
  other.runner.follow({e});
  EXPECT_THROW(other.runner.launch(), prioccl::Error);
}

TEST(CollectiveRunner, APlanNamingAnOpNotYetDecidedWaits) {
  Rank other(false);
  std::vector<float> buf(4);
  LaunchEntry e;
  e.op = 0;
  e.chunks = 1;
  other.runner.follow({e});
  EXPECT_FALSE(other.runner.launch()) << "its decision has not arrived";
  other.runner.add(allReduce(buf, 0, 0));
  EXPECT_TRUE(other.runner.launch());
}

}  // namespace
