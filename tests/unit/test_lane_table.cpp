// The lane table on plain values (src/core/lane_table.h): the tag layout, the in-order window, the
// priority horizon, retiring and failing. test_scheduler.cpp watches the same tags end to end
// through two engines.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <vector>

#include "core/lane_table.h"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::detail::kAgreeLane;
using prioccl::detail::kFixedLanes;
using prioccl::detail::kNamedLane;
using prioccl::detail::kUnnamedLane;
using prioccl::detail::LaneTable;
using prioccl::detail::LiveOp;
using prioccl::detail::OpState;
using prioccl::detail::Slot;

constexpr uint64_t kTags = uint64_t{1} << 20, kSteps = 10;

std::shared_ptr<OpState> op(int priority) {
  auto o = std::make_shared<OpState>();
  o->priority = priority;
  return o;
}

// Activates what the table allows now, in the engine's order; returns the gids made live.
std::vector<uint64_t> activateAll(LaneTable& t, uint32_t l) {
  std::vector<uint64_t> gids;
  while (LiveOp* live = t.nextInOrder(l)) gids.push_back(t.activate(l, *live).gid);
  while (LiveOp* live = t.nextByPriority(l)) gids.push_back(t.activate(l, *live).gid);
  return gids;
}

TEST(LaneTable, TagsAreDistinctAcrossLanesChunksAndStepsAndInvertible) {
  LaneTable t(kTags, kSteps, 8);
  uint32_t p2pA = t.pointToPointLane(1, true, 0), p2pB = t.pointToPointLane(1, true, 3);
  EXPECT_EQ(t.pointToPointLane(1, true, 0), p2pA) << "a lane is made once per (peer, dir, tag)";
  EXPECT_NE(t.pointToPointLane(1, false, 0), p2pA);
  EXPECT_TRUE(LaneTable::isPointToPoint(p2pA));
  EXPECT_FALSE(LaneTable::isPointToPoint(kUnnamedLane));
  std::set<uint64_t> tags;
  size_t made = 0;
  for (uint32_t lane : {kNamedLane, kAgreeLane, kUnnamedLane, p2pA, p2pB})
    for (uint64_t gid = 0; gid < 16; ++gid)
      for (int step = 0; step < static_cast<int>(kSteps); ++step) {
        uint64_t tag = t.tagOf(lane, gid, step);
        ASSERT_LT(tag, kTags);
        tags.insert(tag);
        ++made;
        if (lane < kFixedLanes) {
          int back = -1;
          EXPECT_EQ(t.chunkOfTag(tag, &back), gid);
          EXPECT_EQ(back, static_cast<int>(lane));
        }
      }
  EXPECT_EQ(tags.size(), made) << "two (lane, chunk, step) share a tag";
  // A point-to-point lane's identities repeat every 2 x window chunks, a collective lane's only
  // after its whole share.
  EXPECT_EQ(t.tagOf(p2pA, 0, 1), t.tagOf(p2pA, 2 * t.window(), 1));
  EXPECT_NE(t.tagOf(kNamedLane, 0, 1), t.tagOf(kNamedLane, 2 * t.window(), 1));
  EXPECT_GT(t.pointToPointTags(), 3);
}

TEST(LaneTable, SmallTagSpaceLimitsTheWindowOrFailsClearly) {
  LaneTable limited(64 * 16, 16, 1000);  // 16 tags per chunk, 64 chunks, 4 shares of 16
  EXPECT_TRUE(limited.windowLimited());
  EXPECT_EQ(limited.window(), 8u);
  EXPECT_FALSE(LaneTable(kTags, kSteps, 8).windowLimited());
  EXPECT_THROW(LaneTable(16, 16, 4), prioccl::Error);
}

TEST(LaneTable, InOrderWindowActivatesOnlyInsideItAndMovesWithTheOldest) {
  LaneTable t(kTags, kSteps, 4);
  LiveOp& a = t.add(kNamedLane, op(0), 10, 100, 0, false);
  EXPECT_EQ(a.firstGid, 0u);
  EXPECT_EQ(activateAll(t, kNamedLane), (std::vector<uint64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(activateAll(t, kNamedLane).empty()) << "the window is full";
  // A later chunk finishing does not move the window: the oldest does.
  t.finish(*t.find(kNamedLane, 2));
  EXPECT_TRUE(activateAll(t, kNamedLane).empty());
  t.finish(*t.find(kNamedLane, 0));
  EXPECT_EQ(t[kNamedLane].oldestGid, 1u);
  EXPECT_EQ(activateAll(t, kNamedLane), (std::vector<uint64_t>{4}));
  EXPECT_EQ(t.find(kNamedLane, 4)->chunkIndex, 4u);
  EXPECT_EQ(t.find(kNamedLane, 2), nullptr);
  // The next op's chunks follow the first's in the lane's identities.
  LiveOp& b = t.add(kNamedLane, op(0), 3, 100, 0, false);
  EXPECT_EQ(b.firstGid, 10u);
}

TEST(LaneTable, PriorityHorizonTakesAMoreUrgentOpBeyondTheWindowUpToItsLimit) {
  LaneTable t(kTags, kSteps, 4);
  t.add(kNamedLane, op(5), 100, 100, 5, true);
  LiveOp& equal = t.add(kNamedLane, op(5), 100, 100, 5, true);
  LiveOp& urgent = t.add(kNamedLane, op(1), 100, 100, 1, true);
  std::vector<uint64_t> gids = activateAll(t, kNamedLane);
  // The window's 4 chunks of the first op, then the urgent op's: at least as urgent as every
  // live chunk, so the lane may hold up to kUrgentWindows windows of live chunks.
  ASSERT_EQ(gids.size(), LaneTable::kUrgentWindows * t.window());
  EXPECT_EQ(gids[3], 3u);
  EXPECT_EQ(gids[4], urgent.firstGid);
  EXPECT_EQ(equal.nextChunk, 0u) << "an op as urgent as the in-order one does not jump the queue";
  // A failed communicator forgets every chunk and hands every op back.
  std::vector<std::shared_ptr<OpState>> doomed;
  t.clear(doomed);
  EXPECT_EQ(doomed.size(), 3u);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t[kNamedLane].oldestGid, t[kNamedLane].nextBase);
}

TEST(LaneTable, WithoutPriorityOnlyTheWindowIsLive) {
  LaneTable t(kTags, kSteps, 4);
  t.add(kNamedLane, op(5), 100, 100, 0, false);
  t.add(kNamedLane, op(1), 100, 100, 0, false);  // FIFO: every op scheduled alike
  EXPECT_EQ(activateAll(t, kNamedLane).size(), 4u);
}

TEST(LaneTable, FinishedOpsRetireFromTheFrontOnly) {
  LaneTable t(kTags, kSteps, 8);
  LiveOp& first = t.add(kUnnamedLane, op(0), 2, 10, 0, false);
  LiveOp& second = t.add(kUnnamedLane, op(0), 1, 10, 0, false);
  activateAll(t, kUnnamedLane);
  LiveOp& done = t.finish(*t.find(kUnnamedLane, second.firstGid));
  EXPECT_EQ(&done, &second);
  EXPECT_TRUE(second.finished());
  t.retire();
  EXPECT_EQ(t[kUnnamedLane].live.size(), 2u) << "the second op waits behind the first";
  t.finish(*t.find(kUnnamedLane, 0));
  EXPECT_FALSE(first.finished());
  t.finish(*t.find(kUnnamedLane, 1));
  t.retire();
  EXPECT_TRUE(t.empty());
}

TEST(LaneTable, ReservedIdentityIsSkippedByLaterOps) {
  LaneTable t(kTags, kSteps, 8);
  EXPECT_EQ(t.reserve(kAgreeLane), 0u);
  EXPECT_EQ(t.add(kAgreeLane, op(0), 1, 10, 0, false).firstGid, 1u);
  EXPECT_EQ(t[kAgreeLane].oldestGid, 1u) << "the reserved chunk runs outside the table";
}

}  // namespace
