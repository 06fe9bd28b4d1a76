// The training emulator's model: profile parsing, the ops each schedule issues, and the fluid
// prediction, against cases worked out by hand.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include "fluid.h"
#include "plan.h"
#include "profile.h"

namespace emu {
namespace {

std::string writeTemp(const std::string& text) {
  char name[] = "/tmp/prioccl_profile_XXXXXX";
  int fd = mkstemp(name);
  EXPECT_GE(fd, 0);
  std::ofstream(name) << text;
  close(fd);
  return name;
}

std::string loadError(const std::string& text) {
  std::string path = writeTemp(text);
  try {
    loadProfile(path);
  } catch (const std::runtime_error& e) {
    std::remove(path.c_str());
    return e.what();
  }
  std::remove(path.c_str());
  return "";
}

// Two layers of 100 parameters, 1 ms forward and 1 ms backward each.
Profile twoLayers() {
  Profile p;
  p.name = "two";
  p.layers = {{"a", 100, 1, 1}, {"b", 100, 1, 1}};
  return p;
}

TEST(Profile, ParsesCommentsAndFields) {
  std::string path = writeTemp(
      "# a comment\n\nlayer,params,fwd_ms,bwd_ms\n000_conv,1792,22.3,24.6\n001_relu,0,0.5,0\n");
  Profile p = loadProfile(path);
  std::remove(path.c_str());
  ASSERT_EQ(p.layers.size(), 2u);
  EXPECT_EQ(p.layers[0].name, "000_conv");
  EXPECT_EQ(p.layers[0].params, 1792u);
  EXPECT_DOUBLE_EQ(p.layers[0].fwdMs, 22.3);
  EXPECT_DOUBLE_EQ(p.fwdMs(), 22.8);
  EXPECT_DOUBLE_EQ(p.bwdMs(), 24.6);
}

TEST(Profile, BadFilesNameTheLine) {
  EXPECT_NE(loadError("a,b\n1,2\n").find("expected the header"), std::string::npos);
  EXPECT_NE(loadError("layer,params,fwd_ms,bwd_ms\nx,1,2\n").find(":2: expected 4 fields"),
            std::string::npos);
  EXPECT_NE(loadError("layer,params,fwd_ms,bwd_ms\nx,-1,2,3\n").find("not a parameter count"),
            std::string::npos);
  EXPECT_NE(loadError("layer,params,fwd_ms,bwd_ms\nx,1,-2,3\n").find("not a time"),
            std::string::npos);
  EXPECT_NE(loadError("layer,params,fwd_ms,bwd_ms\n").find("no layers"), std::string::npos);
  EXPECT_NE(loadError("layer,params,fwd_ms,bwd_ms\nx,0,1,1\n").find("no layer has parameters"),
            std::string::npos);
  EXPECT_THROW(loadProfile("/nonexistent/profile.csv"), std::runtime_error);
}

TEST(Profile, ScalingKeepsEveryWeightedLayer) {
  Profile p;
  p.layers = {{"big", 1000, 2, 4}, {"tiny", 3, 1, 1}, {"none", 0, 1, 1}};
  Profile s = scaled(p, 0.01, 0.5);
  EXPECT_EQ(s.layers[0].params, 10u);
  EXPECT_EQ(s.layers[1].params, 1u);  // rounds to 0, kept at 1: the op still happens
  EXPECT_EQ(s.layers[2].params, 0u);
  EXPECT_DOUBLE_EQ(s.layers[0].bwdMs, 2.0);
}

TEST(Plan, ModesParse) {
  EXPECT_EQ(parseMode("p3").mode, Mode::kP3);
  EXPECT_EQ(parseMode("delayed:3").k, 3);
  EXPECT_THROW(parseMode("delayed:0"), std::invalid_argument);
  EXPECT_THROW(parseMode("delayed:"), std::invalid_argument);
  EXPECT_THROW(parseMode("fifo"), std::invalid_argument);
}

TEST(Plan, OpsFollowBackwardOrder) {
  Profile p;
  p.layers = {{"a", 10, 1, 1}, {"relu", 0, 1, 1}, {"b", 20, 1, 1}, {"c", 30, 1, 1}};
  PlanOptions o;
  o.sliceElems = 8;
  o.bucketBytes = 40 * 4;  // 40 elements
  o.cycleMs = 1.5;
  o.fusionBytes = 1 << 20;

  Plan wfbp = makePlan(p, parseMode("wfbp"), o);
  ASSERT_EQ(wfbp.ops.size(), 3u);  // no op for the layer without weights
  EXPECT_EQ(wfbp.ops[0].trigger, 3u);
  EXPECT_EQ(wfbp.ops[0].offset, 30u);
  EXPECT_EQ(wfbp.ops[2].offset, 0u);

  Plan p3 = makePlan(p, parseMode("p3"), o);
  EXPECT_EQ(p3.wait, Wait::kBeforeForward);
  EXPECT_FALSE(p3.fifo);
  EXPECT_EQ(p3.ops[0].priority, 3);  // forward order: the first layer is the most urgent
  EXPECT_EQ(p3.ops[2].priority, 0);

  Plan slice = makePlan(p, parseMode("slice"), o);
  size_t total = 0;
  for (const PlannedOp& op : slice.ops) {
    EXPECT_LE(op.count, 8u);
    total += op.count;
  }
  EXPECT_EQ(total, 60u);
  EXPECT_EQ(slice.ops.size(), 4u + 3u + 2u);

  // DDP: c (30) then b (20) would exceed 40, so c alone; then b + a = 30.
  Plan ddp = makePlan(p, parseMode("ddp"), o);
  ASSERT_EQ(ddp.ops.size(), 2u);
  EXPECT_EQ(ddp.ops[0].offset, 30u);
  EXPECT_EQ(ddp.ops[0].count, 30u);
  EXPECT_EQ(ddp.ops[1].offset, 0u);
  EXPECT_EQ(ddp.ops[1].count, 30u);
  EXPECT_EQ(ddp.ops[1].trigger, 0u);

  // Fused, cycle 1.5 ms: gradients at 1 (c), 2 (b), 4 (a) ms into backward; ticks 1.5, 3, 4.5.
  Plan fused = makePlan(p, parseMode("fused"), o);
  ASSERT_EQ(fused.ops.size(), 3u);
  EXPECT_DOUBLE_EQ(fused.ops[0].delayMs, 0.5);
  EXPECT_DOUBLE_EQ(fused.ops[1].delayMs, 1.0);
  EXPECT_DOUBLE_EQ(fused.ops[2].delayMs, 0.5);
  o.cycleMs = 5;  // everything within one cycle: one op at 5 ms
  fused = makePlan(p, parseMode("fused"), o);
  ASSERT_EQ(fused.ops.size(), 1u);
  EXPECT_EQ(fused.ops[0].count, 60u);
  EXPECT_DOUBLE_EQ(fused.ops[0].delayMs, 1.0);

  Plan lagged = makePlan(p, parseMode("lagged"), o);
  ASSERT_EQ(lagged.ops.size(), 1u);
  EXPECT_EQ(lagged.ops[0].count, 60u);
  EXPECT_EQ(lagged.through, Through::kLaggedAllReduce);
  EXPECT_EQ(wfbp.through, Through::kEngine);

  // delayed:K: DelayedSgd's one op over the whole gradient per step, once backward is over;
  // its step() waits for the pull issued K steps before, one step late.
  Plan delayed = makePlan(p, parseMode("delayed:4"), o);
  ASSERT_EQ(delayed.ops.size(), 1u);
  EXPECT_EQ(delayed.ops[0].offset, 0u);
  EXPECT_EQ(delayed.ops[0].count, 60u);
  EXPECT_EQ(delayed.ops[0].trigger, 0u);
  EXPECT_EQ(delayed.through, Through::kDelayedSgd);
  EXPECT_EQ(delayed.wait, Wait::kPullNextStep);
  EXPECT_EQ(delayed.period, 4);
}

// Two layers (1 ms forward, 1 ms backward each), all-reduce of both 4 ms: each layer's 2 ms.
double predict(const std::string& mode) {
  Profile p = twoLayers();
  return predictIterationMs(p, makePlan(p, parseMode(mode), PlanOptions{}), 4.0);
}

TEST(Fluid, HandWorkedSchedules) {
  // wfbp: forward 0-2, b's gradient at 3 sent 3-5, a's at 4 sent 5-7; next forward at 7.
  EXPECT_NEAR(predict("wfbp"), 7.0, 1e-9);
  // p3 (steady state): b's op starts, a's preempts it; the next forward of a waits for a's op
  // (2 ms after backward ends), of b for the 1 ms of b left: 6 ms per iteration.
  EXPECT_NEAR(predict("p3"), 6.0, 1e-9);
  // lagged: one 4 ms op overlapping a whole 4 ms iteration.
  EXPECT_NEAR(predict("lagged"), 4.0, 1e-9);
  // delayed:K: one 4 ms op per iteration once backward is over, waited one step after the K-th:
  // every op has the next 4 ms iteration to finish (a wait in the K-th step itself would make
  // delayed:1 8 ms and delayed:2 6 ms).
  EXPECT_NEAR(predict("delayed:1"), 4.0, 1e-9);
  EXPECT_NEAR(predict("delayed:2"), 4.0, 1e-9);
}

TEST(Fluid, BoundsHold) {
  // No schedule beats max(compute, comm); none with a wait per iteration beats compute + the
  // last layer's transfer.
  for (const char* mode : {"wfbp", "fused", "ddp", "slice", "p3", "lagged", "delayed:3"})
    EXPECT_GE(predict(mode), 4.0 - 1e-9) << mode;
}

}  // namespace
}  // namespace emu
