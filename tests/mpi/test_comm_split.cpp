// Sub-communicators (priocclCommSplit, Communicator::split) and the health query
// (priocclCommGetAsyncError): groups and ranks as MPI_Comm_split gives them, ops on a child and
// its parent at once, failures confined to the communicator they happen on, and bad arguments on
// one rank failing every rank instead of leaving them in the split.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <climits>
#include <string>
#include <thread>
#include <vector>

#include "mpi_test_util.h"
#include "prioccl/prioccl.h"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::Communicator;
using prioccl::Request;
using prioccl::test::worldRank;
using prioccl::test::worldSize;

// What MPI_Comm_split gives this rank for (color, key), the reference: its rank (-1: none) and
// the group's size, and the sum over the group of `value`. Collective over MPI_COMM_WORLD.
struct Reference {
  int rank = -1, size = 0, sum = 0;
};
Reference mpiSplit(int color, int key, int value) {
  MPI_Comm part;
  MPI_Comm_split(MPI_COMM_WORLD, color < 0 ? MPI_UNDEFINED : color, key, &part);
  Reference ref;
  if (part == MPI_COMM_NULL) return ref;
  MPI_Comm_rank(part, &ref.rank);
  MPI_Comm_size(part, &ref.size);
  MPI_Allreduce(&value, &ref.sum, 1, MPI_INT, MPI_SUM, part);
  MPI_Comm_free(&part);
  return ref;
}

TEST(CommSplit, GroupsAndRanksAsMpiCommSplit) {
  const int rank = worldRank(), size = worldSize();
  Communicator world = Communicator::world();
  struct Case {
    const char* what;
    int color, key;
  };
  const Case cases[] = {{"parity, by rank", rank % 2, rank},
                        {"parity, reversed", rank % 2, -rank},
                        {"one group, equal keys", 7, 0},
                        {"every rank alone", rank, 0},
                        {"last rank left out", rank == size - 1 ? PRIOCCL_SPLIT_NOCOLOR : 0, rank}};
  for (const Case& c : cases) {
    int mine = rank + 1;  // an all-reduce over the group: the sum of its world ranks + 1
    Reference want = mpiSplit(c.color, c.key, mine);
    Communicator part = world.split(c.color, c.key);
    ASSERT_EQ(part.valid(), want.rank >= 0) << c.what;
    if (!part.valid()) continue;
    EXPECT_EQ(part.rank(), want.rank) << c.what;
    EXPECT_EQ(part.size(), want.size) << c.what;
    int got = 0;
    part.allReduce(&mine, &got, 1, priocclInt32, priocclSum);
    EXPECT_EQ(got, want.sum) << c.what;
    part.destroy();
  }
}

// A child and its parent work at once: a bulk all-reduce in flight on the parent while the
// child runs many small ops (named and unnamed), and a named op with the same key on both.
TEST(CommSplit, ChildAndParentAtOnce) {
  const int rank = worldRank(), size = worldSize();
  Communicator world = Communicator::world();
  Communicator half = world.split(rank % 2, rank);
  std::vector<float> bulk(size_t{1} << 20, 1.0f);
  Request r = world.allReduceAsync(bulk.data(), bulk.data(), bulk.size(), priocclFloat32,
                                   priocclSum, 5, "shared.key");
  const int halfSize = half.size();
  for (int i = 0; i < 50; ++i) {
    int v = i, out = 0;
    half.allReduceAsync(&v, &out, 1, priocclInt32, priocclSum, 0, "shared.key").wait();
    EXPECT_EQ(out, i * halfSize) << "op " << i;
    half.allReduce(&v, &out, 1, priocclInt32, priocclMax);
    EXPECT_EQ(out, i);
  }
  r.wait();
  EXPECT_EQ(bulk.back(), float(size));
  half.destroy();
  world.destroy();
}

// A failure on a child (one rank aborts it) shows in every member's priocclCommGetAsyncError
// without an op in flight, and leaves the parent healthy.
TEST(CommSplit, AsyncErrorWithoutAnOp) {
  const int rank = worldRank(), size = worldSize();
  priocclComm_t world = nullptr, child = nullptr;
  ASSERT_EQ(priocclCommInitWorld(&world), priocclSuccess);
  ASSERT_EQ(priocclCommSplit(world, 0, rank, &child), priocclSuccess);
  ASSERT_NE(child, nullptr);
  priocclResult_t health = priocclInternalError;
  ASSERT_EQ(priocclCommGetAsyncError(child, &health), priocclSuccess);
  EXPECT_EQ(health, priocclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == size - 1) {
    ASSERT_EQ(priocclCommAbort(child), priocclSuccess);
  }
  // Every member learns of it within seconds (the abort notice), with no op submitted.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    ASSERT_EQ(priocclCommGetAsyncError(child, &health), priocclSuccess);
    if (health != priocclSuccess) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_NE(health, priocclSuccess) << "rank " << rank << " never saw the child fail";
  if (rank != size - 1 && size > 1) {
    EXPECT_EQ(health, priocclRemoteError);
  }
  ASSERT_EQ(priocclCommGetAsyncError(world, &health), priocclSuccess);
  EXPECT_EQ(health, priocclSuccess) << "the parent failed with its child";
  int v = 1, out = 0;
  EXPECT_EQ(priocclAllReduce(&v, &out, 1, priocclInt32, priocclSum, world), priocclSuccess);
  EXPECT_EQ(out, size);
  EXPECT_EQ(priocclCommDestroy(child), priocclSuccess);
  EXPECT_EQ(priocclCommDestroy(world), priocclSuccess);
}

// Bad arguments on one rank fail the split on every rank, promptly (no rank waits in it).
TEST(CommSplit, BadArgumentOnOneRankFailsEveryRank) {
  const int rank = worldRank(), size = worldSize();
  priocclComm_t world = nullptr;
  ASSERT_EQ(priocclCommInitWorld(&world), priocclSuccess);
  priocclComm_t part = reinterpret_cast<priocclComm_t>(&part);  // must come back NULL
  EXPECT_EQ(priocclCommSplit(world, rank == size - 1 ? -2 : 0, 0, &part), priocclInvalidArgument);
  EXPECT_EQ(part, nullptr);
  std::string msg = priocclGetLastError(world);
  EXPECT_NE(msg.find(rank == size - 1 ? "color -2" : "another rank"), std::string::npos) << msg;
  EXPECT_EQ(priocclCommSplit(world, 0, 0, rank == 0 ? nullptr : &part), priocclInvalidArgument);
  msg = priocclGetLastError(world);
  EXPECT_NE(msg.find(rank == 0 ? "newcomm is NULL" : "another rank"), std::string::npos) << msg;
  EXPECT_EQ(priocclCommGetAsyncError(world, nullptr), priocclInvalidArgument);
  priocclResult_t health = priocclSuccess;
  EXPECT_EQ(priocclCommGetAsyncError(nullptr, &health), priocclInvalidArgument);
  // The parent still works.
  int v = 2, out = 0;
  EXPECT_EQ(priocclAllReduce(&v, &out, 1, priocclInt32, priocclSum, world), priocclSuccess);
  EXPECT_EQ(out, 2 * size);
  EXPECT_EQ(priocclCommDestroy(world), priocclSuccess);
}

// Shrink needs ranks that can be left out of the bootstrap's collectives: over MPI it is refused,
// saying why, and the communicator is unharmed; bad arguments are refused before that.
TEST(CommShrink, RefusedOverMpiWithTheReason) {
  const int size = worldSize();
  priocclComm_t world = nullptr;
  ASSERT_EQ(priocclCommInitWorld(&world), priocclSuccess);
  const int gone[1] = {size - 1};
  priocclComm_t rest = reinterpret_cast<priocclComm_t>(&rest);  // must come back NULL
  EXPECT_EQ(priocclCommShrink(world, gone, 1, &rest), priocclInvalidUsage);
  EXPECT_EQ(rest, nullptr);
  std::string msg = priocclGetLastError(world);
  EXPECT_NE(msg.find("priocclCommShrink"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MPI cannot leave ranks out"), std::string::npos) << msg;
  EXPECT_EQ(priocclCommShrink(world, nullptr, 1, &rest), priocclInvalidArgument);
  EXPECT_EQ(priocclCommShrink(world, gone, 1, nullptr), priocclInvalidArgument);
  int v = 3, out = 0;
  EXPECT_EQ(priocclAllReduce(&v, &out, 1, priocclInt32, priocclSum, world), priocclSuccess);
  EXPECT_EQ(out, 3 * size);
  EXPECT_EQ(priocclCommDestroy(world), priocclSuccess);
}

}  // namespace
