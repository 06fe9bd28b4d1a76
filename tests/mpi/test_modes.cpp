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

// SSD-SGD against the paper's Algorithms 1 and 2 worked by hand on one weight, the same
// gradient (1) on every rank: lr 0.1, m 0.5, localLr 0.4, alpha 2, beta 0.5, no warm-up, w0 = 1.
DelayedSgd::Options handWorked(int k) {
  DelayedSgd::Options o;
  o.k = k;
  o.warmupSteps = 0;
  o.sgd.lr = 0.1;
  o.sgd.momentum = 0.5;
  o.localLr = 0.4;
  return o;
}

TEST(Delayed, FollowsThePapersAlgorithmsWithK2) {
  Communicator comm = Communicator::world();
  float w = 1.0f, g = 1.0f;
  DelayedSgd delayed(comm, &w, 1, handWorked(2));
  // Step 0: pre == w, so gsync = 0: w = 1 - 0.4 (2 x 1) = 0.2.
  EXPECT_FALSE(delayed.step(&g));
  EXPECT_NEAR(w, 0.2, 1e-6);
  // Step 1: gsync = (1 - 0.2)(1 - 0.5) / (0.1 x 2) = 2: w = 0.2 - 0.4 (2 + 0.5 x 2) = -1.
  EXPECT_FALSE(delayed.step(&g));
  EXPECT_NEAR(w, -1.0, 1e-6);
  EXPECT_EQ(delayed.globalWeights()[0], 1.0f);  // nothing pulled yet
  // Step 2 uses the pull issued at step 1: the replica takes both averages (v = 1, G = 0.9;
  // v = 1.5, G = 0.75) and gsync is computed from the old pre (1) and the pulled 0.75 before pre
  // moves: (1 - 0.75)(0.5) / 0.2 = 0.625; w = 0.75 - 0.4 (2 + 0.5 x 0.625) = -0.175.
  EXPECT_TRUE(delayed.step(&g));
  EXPECT_NEAR(delayed.globalWeights()[0], 0.75, 1e-6);
  EXPECT_NEAR(w, -0.175, 1e-6);
  // Step 3: pre is now 0.75: gsync = (0.75 + 0.175)(0.5) / 0.2 = 2.3125;
  // w = -0.175 - 0.4 (2 + 1.15625) = -1.4375.
  EXPECT_FALSE(delayed.step(&g));
  EXPECT_NEAR(w, -1.4375, 1e-5);
  // flush: the averages of steps 2 and 3 (v = 1.75, G = 0.575; v = 1.875, G = 0.3875).
  delayed.flush();
  EXPECT_NEAR(w, 0.3875, 1e-6);
  EXPECT_EQ(w, delayed.globalWeights()[0]);
}

TEST(Delayed, KOneIsTheAsynchronousOneStepDelayNotSynchronousSgd) {
  Communicator comm = Communicator::world();
  float w = 1.0f, g = 1.0f;
  DelayedSgd delayed(comm, &w, 1, handWorked(1));
  EXPECT_FALSE(delayed.step(&g));  // no pull yet: w = 1 - 0.4 x 2 = 0.2 (synchronous SGD: 0.9)
  EXPECT_NEAR(w, 0.2, 1e-6);
  // Pull of step 0 (G = 0.9), gsync = (1 - 0.9)(0.5) / 0.1 = 0.5: w = 0.9 - 0.4 (2 + 0.25) = 0.
  EXPECT_TRUE(delayed.step(&g));
  EXPECT_NEAR(w, 0.0, 1e-6);
  EXPECT_NEAR(delayed.globalWeights()[0], 0.9, 1e-6);
}

TEST(Delayed, EachPushIsAppliedWithTheLearningRateOfItsStep) {
  Communicator comm = Communicator::world();
  float w = 1.0f, g = 1.0f;
  DelayedSgd::Options o = handWorked(2);
  o.sgd.momentum = 0;
  DelayedSgd delayed(comm, &w, 1, o);
  delayed.step(&g);              // pushed at lr 0.1; GLU: w = 1 - 0.4 x 2 = 0.2
  delayed.setLearningRate(0.2);  // localLr follows: 0.8
  EXPECT_EQ(delayed.learningRate(), 0.2);
  delayed.step(&g);  // pushed at 0.2; gsync = (1 - 0.2) / (0.1 x 2); w = 0.2 - 0.8 (2 + 2) = -3
  EXPECT_NEAR(w, -3.0, 1e-6);
  // The pull: G = 1 - 0.1 - 0.2 = 0.7; gsync's lr k is their sum 0.3: (1 - 0.7) / 0.3 = 1;
  // w = 0.7 - 0.8 (2 + 0.5) = -1.3.
  EXPECT_TRUE(delayed.step(&g));
  EXPECT_NEAR(delayed.globalWeights()[0], 0.7, 1e-6);
  EXPECT_NEAR(w, -1.3, 1e-5);
  EXPECT_THROW(delayed.setLearningRate(0), InvalidArgument);
  EXPECT_THROW(delayed.setLearningRate(NAN), InvalidArgument);
}

// Every rank's gradient differs: at every pull the replica must equal synchronous momentum SGD
// (weight decay included, computed in double) on the averaged gradients, bitwise the same on
// every rank; every step's local weights are GLU's update of the (pulled) weights.
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
  std::vector<std::vector<double>> refAfter;  // the reference after t + 1 updates
  DelayedSgd delayed(comm, w.data(), n, o);
  auto gradOf = [&](int rank, int t, size_t i) {
    return static_cast<float>(0.01 * (rank + 1) * std::sin(0.01 * i + t));
  };
  std::vector<float> pre = w;  // GLU's pre-weight, tracked as Algorithm 2 says
  for (int t = 0; t < steps; ++t) {
    std::vector<float> g(n);
    for (size_t i = 0; i < n; ++i) g[i] = gradOf(worldRank(), t, i);
    std::vector<float> before = w;
    bool used = delayed.step(g.data());
    for (size_t i = 0; i < n; ++i) {  // the reference: every step, synchronous
      double avg = 0;
      for (int r = 0; r < p; ++r) avg += gradOf(r, t, i);
      avg /= p;
      vel[i] = o.sgd.momentum * vel[i] + avg + o.sgd.weightDecay * ref[i];
      ref[i] -= o.sgd.lr * vel[i];
    }
    refAfter.push_back(ref);
    int j = t - o.warmupSteps;  // local updates so far
    bool pull = j > 0 && j % o.k == 0;
    ASSERT_EQ(used, t < o.warmupSteps || pull) << "step " << t;
    if (t < o.warmupSteps) {
      for (size_t i = 0; i < n; ++i)
        ASSERT_NEAR(w[i], ref[i], 1e-5 * (1 + std::fabs(ref[i]))) << "step " << t << " i " << i;
      pre = w;
      continue;
    }
    if (pull) {  // the replica holds every average up to step t - 1
      const std::vector<double>& r = refAfter[t - 1];
      for (size_t i = 0; i < n; ++i)
        ASSERT_NEAR(delayed.globalWeights()[i], r[i], 1e-5 * (1 + std::fabs(r[i])))
            << "step " << t << " i " << i;
      std::vector<float> lo(delayed.globalWeights(), delayed.globalWeights() + n), hi = lo;
      comm.allReduce(lo.data(), lo.data(), n, priocclFloat32, priocclMin);
      comm.allReduce(hi.data(), hi.data(), n, priocclFloat32, priocclMax);
      ASSERT_EQ(lo, hi) << "the replica differs across ranks at step " << t;
      before.assign(delayed.globalWeights(), delayed.globalWeights() + n);
    }
    GluParams glu;
    glu.localLr = 4 * o.sgd.lr;
    glu.weightDecay = o.sgd.weightDecay;
    glu.momentum = o.sgd.momentum;
    glu.lr = o.sgd.lr;
    glu.k = o.k;
    std::vector<float> expect = before;
    gluUpdate(expect.data(), g.data(), pre.data(), n, priocclFloat32, glu);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(w[i], expect[i]) << "GLU, step " << t << " i " << i;
    if (pull) pre = before;
  }
  // 14 steps: 2 warm-up, then pushes 2..13; the last pull (step 11) took 2..10: flush applies
  // 11..13 and the weights are exactly the synchronous ones.
  delayed.flush();
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

TEST(Delayed, RanksWithDifferentStartingWeightsOrHyperParametersAllFail) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks to disagree";
  Communicator comm = Communicator::world();
  std::vector<float> w(100, 1.0f);
  if (worldRank() == 1) w[57] = 1.0f + 1e-7f;
  DelayedSgd::Options o;
  try {
    DelayedSgd delayed(comm, w.data(), w.size(), o);
    FAIL() << "different starting weights were accepted";
  } catch (const InvalidUsage& e) {
    EXPECT_NE(std::string(e.what()).find("starting weights"), std::string::npos) << e.what();
  }
  w[57] = 1.0f;
  o.beta = worldRank() == 1 ? 0.25 : 0.5;
  try {
    DelayedSgd delayed(comm, w.data(), w.size(), o);
    FAIL() << "different beta was accepted";
  } catch (const InvalidUsage& e) {
    EXPECT_NE(std::string(e.what()).find("beta"), std::string::npos) << e.what();
  }
  o.beta = 0.5;
  DelayedSgd delayed(comm, w.data(), w.size(), o);  // the communicator still works
}

// P3's gate: backward submits layers last to first, the next forward waits for each just before
// using it; each wait yields exactly that layer's sum, iteration after iteration.
TEST(LayerGate, EachForwardWaitGivesThatLayersSum) {
  Communicator comm = Communicator::world();
  const std::vector<size_t> sizes = {3, 70000, 517};
  LayerGate gate(comm, 3, "test.gate");
  EXPECT_EQ(gate.layers(), 3);
  std::vector<std::vector<int32_t>> g(sizes.size());
  for (int it = 0; it < 4; ++it) {
    for (int layer = 0; layer < 3; ++layer) {  // forward
      bool submitted = gate.wait(layer);
      ASSERT_EQ(submitted, it > 0) << "iteration " << it << " layer " << layer;
      for (size_t i = 0; submitted && i < sizes[layer]; ++i) {
        ASSERT_EQ(g[layer][i], summed(it - 1 + layer, i))
            << "iteration " << it << " layer " << layer << " element " << i;
      }
    }
    for (int layer = 2; layer >= 0; --layer) {  // backward
      g[layer] = grads(it + layer, sizes[layer]);
      gate.submit(layer, g[layer].data(), g[layer].data(), sizes[layer], priocclInt32, priocclSum);
    }
  }
  EXPECT_THROW(gate.submit(1, g[1].data(), g[1].data(), sizes[1], priocclInt32, priocclSum),
               InvalidUsage);  // submitted in the last iteration, not waited for since
  EXPECT_THROW(gate.wait(3), InvalidArgument);
  EXPECT_THROW(gate.submit(-1, g[0].data(), g[0].data(), 1, priocclInt32, priocclSum),
               InvalidArgument);
  gate.waitAll();
  for (size_t i = 0; i < sizes[2]; ++i) ASSERT_EQ(g[2][i], summed(3 + 2, i));
  EXPECT_FALSE(gate.wait(0));
}

TEST(LayerGate, CApiAndDisagreeingRanks) {
  priocclComm_t comm = nullptr;
  ASSERT_EQ(priocclCommInitWorld(&comm), priocclSuccess);
  priocclGate_t gate = nullptr;
  ASSERT_EQ(priocclGateCreate(comm, 2, nullptr, &gate), priocclSuccess)
      << priocclGetLastError(comm);
  std::vector<float> a(100, 1.0f), b(5, 2.0f);
  int submitted = -1;
  ASSERT_EQ(priocclGateWait(gate, 0, &submitted), priocclSuccess);
  EXPECT_EQ(submitted, 0);
  ASSERT_EQ(priocclGateSubmit(gate, 1, b.data(), b.data(), b.size(), priocclFloat32, priocclSum),
            priocclSuccess);
  ASSERT_EQ(priocclGateSubmit(gate, 0, a.data(), a.data(), a.size(), priocclFloat32, priocclAvg),
            priocclSuccess);
  EXPECT_EQ(priocclGateSubmit(gate, 0, a.data(), a.data(), a.size(), priocclFloat32, priocclAvg),
            priocclInvalidUsage);
  EXPECT_EQ(priocclGateSubmit(gate, 2, a.data(), a.data(), 1, priocclFloat32, priocclSum),
            priocclInvalidArgument);
  ASSERT_EQ(priocclGateWait(gate, 0, &submitted), priocclSuccess);
  EXPECT_EQ(submitted, 1);
  EXPECT_EQ(a[99], 1.0f);
  ASSERT_EQ(priocclGateWaitAll(gate), priocclSuccess);
  EXPECT_EQ(b[4], 2.0f * worldSize());
  ASSERT_EQ(priocclGateDestroy(gate), priocclSuccess);
  EXPECT_EQ(priocclGateWait(gate, 0, &submitted), priocclInvalidUsage);
  EXPECT_EQ(priocclGateCreate(comm, 0, nullptr, &gate), priocclInvalidArgument);
  if (worldSize() >= 2) {
    EXPECT_EQ(priocclGateCreate(comm, 2 + worldRank() % 2, "disagree", &gate), priocclInvalidUsage);
    EXPECT_NE(std::string(priocclGetLastError(comm)).find("layers"), std::string::npos);
  }
  ASSERT_EQ(priocclCommDestroy(comm), priocclSuccess);
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
  ASSERT_EQ(priocclDelayedSetLearningRate(delayed, 0.05, 0), priocclSuccess);
  EXPECT_EQ(priocclDelayedSetLearningRate(delayed, -1, 0), priocclInvalidArgument);
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
