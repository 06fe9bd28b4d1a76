// PriorityCounts: the scheduler's amounts by priority (core/priority_counts.h).
#include <gtest/gtest.h>

#include "common/error.h"
#include "core/priority_counts.h"

using prioccl::detail::PriorityCounts;

TEST(PriorityCounts, KeepsTheMostUrgentFirstAndDropsEmptiedPriorities) {
  PriorityCounts c;
  EXPECT_TRUE(c.empty());
  c.add(5, 10);
  c.add(-3, 1);
  c.add(5, 2);
  c.add(7, 4);
  EXPECT_EQ(c.mostUrgent(), -3);
  EXPECT_EQ(c.atOrAbove(-4), 0u);
  EXPECT_EQ(c.atOrAbove(-3), 1u);
  EXPECT_EQ(c.atOrAbove(5), 13u);
  EXPECT_EQ(c.atOrAbove(100), 17u);
  c.remove(-3, 1);
  EXPECT_EQ(c.mostUrgent(), 5);
  c.remove(5, 12);
  EXPECT_EQ(c.mostUrgent(), 7);
  EXPECT_EQ(c.atOrAbove(6), 0u);
  c.remove(7, 4);
  EXPECT_TRUE(c.empty());
}

TEST(PriorityCounts, ZeroAmountsCountNothing) {
  PriorityCounts c;
  c.add(4, 0);  // an empty message in flight
  EXPECT_TRUE(c.empty());
  c.add(4, 3);
  c.remove(4, 3);
  c.remove(4, 0);  // its completion, after the priority has emptied
  EXPECT_TRUE(c.empty());
}

TEST(PriorityCounts, RemovingMoreThanWasAddedIsAnInternalError) {
  PriorityCounts c;
  c.add(1, 2);
  EXPECT_THROW(c.remove(1, 3), prioccl::Error);
  EXPECT_THROW(c.remove(2, 1), prioccl::Error);
  c.remove(1, 2);
  EXPECT_TRUE(c.empty());
}
