// The training modes on several ranks: exact semantics against hand-computed references (which
// step's aggregate comes back when; the global replica of SSD-SGD equals synchronous momentum
// SGD), with other ops interleaved, and bad input through both APIs.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "prioccl/modes.hpp"
#include "prioccl/prioccl.h"

namespace prioccl {
namespace {

using test::worldRank;
using test::worldSize;

// Rank r's gradient at step t: (r+1)(t+1) + i. Its sum over p ranks: p(p+1)/2 (t+1) + p i.
std::vector<int32_t> grads(int t, size_t n) {
  std::vector<int32_t> g(n);
  for (size_t i = 0; i < n; ++i) g[i] = (worldRank() + 1) * (t + 1) + static_cast<int32_t>(i);
  return g;
}
int32_t summed(int t, size_t i) {
  int p = worldSize();
  return p * (p + 1) / 2 * (t + 1) + p * static_cast<int32_t>(i);
}
void expectAggregateOf(int t, const int32_t* got, size_t n, const char* when) {
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], summed(t, i)) << when << ", element " << i;
}

TEST(Lagged, ReturnsThePreviousStepsAggregateAfterWarmup) {
  Communicator comm = Communicator::world();
  const size_t n = 100003;  // several chunks
  LaggedAllReduce::Options o;
  o.warmupSteps = 2;
  LaggedAllReduce lagged(comm, n, priocclInt32, priocclSum, o);
  std::vector<int32_t> out(n, -1);
  for (int t = 0; t < 6; ++t) {
    std::vector<int32_t> g = grads(t, n);
    bool has = lagged.step(g.data(), out.data());
    std::fill(g.begin(), g.end(), -7);  // the caller may reuse its buffer at once
    // Another op in flight meanwhile, more urgent than the fused one.
    std::vector<int32_t> metric(16, worldRank());
    Request r = comm.allReduceAsync(metric.data(), metric.data(), metric.size(), priocclMax, 0);
    if (t < 2) {  // warm-up: synchronous, this step's own aggregate
      ASSERT_TRUE(has) << t;
      expectAggregateOf(t, out.data(), n, "warm-up step");
    } else if (t == 2) {
      ASSERT_FALSE(has) << "the switch step has no aggregate";
    } else {
      ASSERT_TRUE(has) << t;
      expectAggregateOf(t - 1, out.data(), n, "after the switch");
      expectAggregateOf(t - 1, static_cast<const int32_t*>(lagged.result()), n, "result()");
    }
    r.wait();
    EXPECT_EQ(metric[0], worldSize() - 1);
  }
  EXPECT_EQ(lagged.steps(), 6);
  ASSERT_TRUE(lagged.flush(out.data()));
  expectAggregateOf(5, out.data(), n, "flush");
  EXPECT_FALSE(lagged.flush(out.data())) << "nothing left after a flush";
  lagged.destroy();
  EXPECT_THROW(lagged.step(out.data(), out.data()), InvalidUsage);
}

TEST(Lagged, WithoutOutTheResultIsReadInPlace) {
  Communicator comm = Communicator::world();
  const size_t n = 4097;
  LaggedAllReduce lagged(comm, n, priocclInt32, priocclSum);  // no warm-up
  for (int t = 0; t < 4; ++t) {
    std::vector<int32_t> g = grads(t, n);
    bool has = lagged.step(g.data(), nullptr);
    EXPECT_EQ(has, t > 0);
    if (has) expectAggregateOf(t - 1, static_cast<const int32_t*>(lagged.result()), n, "result");
  }
}

TEST(Lagged, ZeroLengthWorks) {
  Communicator comm = Communicator::world();
  LaggedAllReduce lagged(comm, 0, priocclFloat32, priocclSum);
  EXPECT_FALSE(lagged.step(nullptr, nullptr));
  EXPECT_TRUE(lagged.step(nullptr, nullptr));
  EXPECT_TRUE(lagged.flush(nullptr));
}

TEST(Lagged, RanksThatDisagreeAllFailAtCreation) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks to disagree";
  Communicator comm = Communicator::world();
  size_t n = worldRank() == 0 ? 10 : 11;
  try {
    LaggedAllReduce lagged(comm, n, priocclFloat32, priocclSum);
    FAIL() << "created with different counts";
  } catch (const InvalidUsage& e) {
    EXPECT_NE(std::string(e.what()).find("ranks disagree on count (values from 10 to 11"),
              std::string::npos)
        << e.what();
  }
  // The communicator still works.
  int one = 1, sum = 0;
  comm.allReduce(&one, &sum, 1, priocclSum);
  EXPECT_EQ(sum, worldSize());
}

TEST(Lagged, CApi) {
  priocclComm_t comm = nullptr;
  ASSERT_EQ(priocclCommInitWorld(&comm), priocclSuccess);
  const size_t n = 1000;
  priocclLagged_t lagged = nullptr;
  ASSERT_EQ(priocclLaggedCreate(comm, n, priocclInt32, priocclSum, 1, 1 << 30, "c.lagged", &lagged),
            priocclSuccess)
      << priocclGetLastError(comm);
  std::vector<int32_t> out(n);
  int has = -1;
  for (int t = 0; t < 3; ++t) {
    std::vector<int32_t> g = grads(t, n);
    ASSERT_EQ(priocclLaggedStep(lagged, g.data(), out.data(), &has), priocclSuccess);
    EXPECT_EQ(has, t == 1 ? 0 : 1) << t;
    if (t == 0) expectAggregateOf(0, out.data(), n, "C warm-up");
    if (t == 2) expectAggregateOf(1, out.data(), n, "C step 2");
  }
  const void* result = nullptr;
  ASSERT_EQ(priocclLaggedFlush(lagged, nullptr, &has), priocclSuccess);
  ASSERT_EQ(priocclLaggedResult(lagged, &result), priocclSuccess);
  expectAggregateOf(2, static_cast<const int32_t*>(result), n, "C flush");
  ASSERT_EQ(priocclLaggedDestroy(lagged), priocclSuccess);
  EXPECT_EQ(priocclLaggedStep(lagged, out.data(), out.data(), &has), priocclInvalidUsage);
  EXPECT_NE(std::string(priocclGetLastError(nullptr)).find("lagged is not live"),
            std::string::npos);
  EXPECT_EQ(priocclLaggedDestroy(lagged), priocclInvalidUsage);
  EXPECT_EQ(priocclLaggedStep(nullptr, out.data(), out.data(), &has), priocclInvalidArgument);
  EXPECT_EQ(priocclLaggedCreate(comm, n, priocclInt32, priocclSum, -1, 0, nullptr, &lagged),
            priocclInvalidArgument);
  double ratio = 0;
  EXPECT_EQ(priocclSwitchDecayLrRatio(9, 10, &ratio), priocclSuccess);
  EXPECT_DOUBLE_EQ(ratio, 2.0);
  ASSERT_EQ(priocclCommDestroy(comm), priocclSuccess);
}

// SSD-SGD: every rank's gradient differs; the global weights at each boundary must equal
// synchronous momentum SGD (weight decay included) on the averaged gradients, in double.
TEST(Delayed, GlobalReplicaEqualsSynchronousMomentumSgd) {
  Communicator comm = Communicator::world();
  const size_t n = 5001;
  const int steps = 14, p = worldSize();
  DelayedSgd::Options o;
  o.k = 3;
  o.warmupSteps = 2;
  o.sgd.lr = 0.05;
  o.sgd.momentum = 0.9;
  o.sgd.weightDecay = 0.01;
  std::vector<float> w(n);
  for (size_t i = 0; i < n; ++i) w[i] = static_cast<float>(std::cos(0.001 * i));
  std::vector<double> ref(w.begin(), w.end()), vel(n, 0.0);
  DelayedSgd delayed(comm, w.data(), n, o);
  auto gradOf = [&](int rank, int t, size_t i) {
    return static_cast<float>(0.01 * (rank + 1) * std::sin(0.01 * i + t));
  };
  for (int t = 0; t < steps; ++t) {
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = gradOf(worldRank(), t, i);
    std::vector<float> before = w;
    std::vector<float> pre(delayed.globalWeights(), delayed.globalWeights() + n);
    bool synced = delayed.step(g.data());
    for (size_t i = 0; i < n; ++i) {  // the reference: every step, synchronous
      double avg = 0;
      for (int r = 0; r < p; ++r) avg += gradOf(r, t, i);
      avg /= p;
      vel[i] = o.sgd.momentum * vel[i] + avg + o.sgd.weightDecay * ref[i];
      ref[i] -= o.sgd.lr * vel[i];
    }
    bool boundary = t < o.warmupSteps || (t - o.warmupSteps + 1) % o.k == 0;
    ASSERT_EQ(synced, boundary) << "step " << t;
    if (boundary) {
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(w[i], ref[i], 1e-5 * (1 + std::fabs(ref[i]))) << "step " << t << " i " << i;
        ASSERT_EQ(w[i], delayed.globalWeights()[i]);
      }
    } else {  // GLU on the local weights with this rank's own gradient
      GluParams glu;
      glu.localLr = 4 * o.sgd.lr;
      glu.alpha = 2.0;
      glu.beta = 0.5;
      glu.weightDecay = o.sgd.weightDecay;
      glu.momentum = o.sgd.momentum;
      glu.lr = o.sgd.lr;
      glu.k = o.k;
      gluUpdate(before.data(), g.data(), pre.data(), n, priocclFloat32, glu);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(w[i], before[i]) << "GLU, step " << t;
    }
  }
  delayed.flush();  // 14 steps: 2 warm-up + 4 boundaries of 3: nothing pending, a no-op
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(w[i], ref[i], 1e-5 * (1 + std::fabs(ref[i])));
  delayed.destroy();
  EXPECT_THROW(delayed.step(w.data()), InvalidUsage);
}

TEST(Delayed, FlushAppliesAPartialWindow) {
  Communicator comm = Communicator::world();
  std::vector<float> w(10, 1.0f);
  DelayedSgd::Options o;
  o.k = 4;
  o.warmupSteps = 0;
  o.sgd.momentum = 0;
  o.sgd.lr = 0.5;
  DelayedSgd delayed(comm, w.data(), w.size(), o);
  std::vector<float> g(10, 1.0f);  // the same on every rank: its average is 1
  EXPECT_FALSE(delayed.step(g.data()));
  EXPECT_FALSE(delayed.step(g.data()));
  delayed.flush();  // two plain SGD steps of 0.5 x 1
  for (float x : w) EXPECT_EQ(x, 0.0f);
}

TEST(Delayed, CApiAndBadInput) {
  priocclComm_t comm = nullptr;
  ASSERT_EQ(priocclCommInitWorld(&comm), priocclSuccess);
  std::vector<float> w(64, 0.5f), g(64, 0.25f);
  priocclDelayedConfig_t cfg = PRIOCCL_DELAYED_CONFIG_INITIALIZER;
  cfg.warmupSteps = 1;
  priocclDelayed_t delayed = nullptr;
  ASSERT_EQ(priocclDelayedCreate(comm, w.data(), w.size(), &cfg, "c.delayed", &delayed),
            priocclSuccess)
      << priocclGetLastError(comm);
  int synced = -1;
  ASSERT_EQ(priocclDelayedStep(delayed, g.data(), &synced), priocclSuccess);
  EXPECT_EQ(synced, 1);
  ASSERT_EQ(priocclDelayedStep(delayed, g.data(), &synced), priocclSuccess);
  EXPECT_EQ(synced, 0);
  ASSERT_EQ(priocclDelayedFlush(delayed), priocclSuccess);
  ASSERT_EQ(priocclDelayedDestroy(delayed), priocclSuccess);
  EXPECT_EQ(priocclDelayedStep(delayed, g.data(), &synced), priocclInvalidUsage);
  cfg.k = 0;
  EXPECT_EQ(priocclDelayedCreate(comm, w.data(), w.size(), &cfg, nullptr, &delayed),
            priocclInvalidArgument);
  EXPECT_NE(std::string(priocclGetLastError(comm)).find("need k >= 1"), std::string::npos);
  EXPECT_EQ(priocclDelayedCreate(comm, w.data(), w.size(), nullptr, nullptr, &delayed),
            priocclInvalidArgument);
  int s = 0;
  EXPECT_EQ(priocclSpecTrainStaleness(1, 4, 1, &s), priocclSuccess);
  EXPECT_EQ(s, 2);
  EXPECT_EQ(priocclGluUpdate(w.data(), g.data(), w.data(), w.size(), priocclInt32, 0.4, 2, 0.5, 0,
                             0.9, 0.1, 2),
            priocclInvalidArgument);
  ASSERT_EQ(priocclCommDestroy(comm), priocclSuccess);
}

}  // namespace
}  // namespace prioccl
