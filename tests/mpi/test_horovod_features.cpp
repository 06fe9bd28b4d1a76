// What Horovod offers beyond plain collectives, across real ranks. Join (Communicator::join,
// priocclJoin): a joined rank takes part in the others' named ops with the op's identity, so their
// results are bitwise what the same op gives when that rank passes the identity itself; ops a
// joined rank cannot take part in fail everywhere, naming it; ranks number their ops alike after
// the join; the last rank to join is reported. Shapes (priocclShapeNext): same-count,
// different-shape ops fail as mismatches. The timeline started and stopped at run time.
#include <gtest/gtest.h>
#include <mpi.h>

#include <unistd.h>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "prioccl/prioccl.h"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::Communicator;
using prioccl::test::kDtypes;
using prioccl::test::kOps;
using prioccl::test::sizeOf;
using prioccl::test::worldRank;
using prioccl::test::worldSize;

// Element i of rank r's data: 1 or 2 in the dtype (small, so products of a few stay exact).
std::vector<unsigned char> data(priocclDataType_t dt, size_t count, int r) {
  std::vector<unsigned char> out(count * sizeOf(dt));
  for (size_t i = 0; i < count; ++i) {
    double v = 1 + static_cast<double>((static_cast<size_t>(r) + i) % 2);
    unsigned char* p = out.data() + i * sizeOf(dt);
    switch (dt) {
      case priocclFloat16: {
        uint16_t h = v == 1 ? 0x3C00 : 0x4000;
        std::memcpy(p, &h, 2);
        break;
      }
      case priocclBfloat16: {
        uint16_t b = v == 1 ? 0x3F80 : 0x4000;
        std::memcpy(p, &b, 2);
        break;
      }
      case priocclFloat32: {
        float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case priocclFloat64:
        std::memcpy(p, &v, 8);
        break;
      default: {  // integers: little-endian low byte, the rest zero
        p[0] = static_cast<unsigned char>(v);
        break;
      }
    }
  }
  return out;
}

// What a rank passes to stand for "no contribution" in the reference run: zeros for Sum and Avg,
// ones for Prod, and for Min/Max another rank's data (a duplicate changes neither).
std::vector<unsigned char> neutral(priocclDataType_t dt, priocclRedOp_t op, size_t count) {
  if (op == priocclMin || op == priocclMax) return data(dt, count, 0);
  if (op == priocclProd) {
    std::vector<unsigned char> ones(count * sizeOf(dt));
    for (size_t i = 0; i < count; ++i) {
      auto one = data(dt, 1, 0);  // rank 0, element 0: 1
      std::memcpy(ones.data() + i * sizeOf(dt), one.data(), sizeOf(dt));
    }
    return ones;
  }
  return std::vector<unsigned char>(count * sizeOf(dt), 0);
}

std::string name(const char* what, priocclDataType_t dt, priocclRedOp_t op, size_t count) {
  return std::string(what) + "." + std::to_string(dt) + "." + std::to_string(op) + "." +
         std::to_string(count);
}

// Every rank reports the same last rank to join; returns it.
int sameEverywhere(int lastRank) {
  int lo = 0, hi = 0;
  MPI_Allreduce(&lastRank, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&lastRank, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << "ranks disagree on the last rank to join";
  return lastRank;
}

// The last rank joins at once; the others all-reduce every dtype and op, then join. Afterwards
// every rank runs the same ops again with the last rank passing a neutral buffer: the results
// must be bitwise equal.
TEST(Join, JoinedRankContributesTheIdentity) {
  const int rank = worldRank(), size = worldSize(), joiner = size - 1;
  Communicator comm = Communicator::world();
  struct Case {
    priocclDataType_t dt;
    priocclRedOp_t op;
    size_t count;
  };
  std::vector<Case> cases;
  for (priocclDataType_t dt : kDtypes)
    for (priocclRedOp_t op : kOps) cases.push_back({dt, op, 7});
  // Several MiB: many chunks, so the stand-in moves data like any op.
  cases.push_back({priocclFloat32, priocclSum, (3u << 20) / prioccl::test::kSanitizerShrink});
  std::vector<std::vector<unsigned char>> during(cases.size());
  int last;
  if (rank == joiner) {
    last = comm.join();
  } else {
    std::vector<prioccl::Request> requests;
    for (size_t c = 0; c < cases.size(); ++c) {
      const Case& k = cases[c];
      during[c] = data(k.dt, k.count, rank);
      requests.push_back(comm.allReduceAsync(during[c].data(), during[c].data(), k.count, k.dt,
                                             k.op, static_cast<int>(c % 3),
                                             name("ar", k.dt, k.op, k.count)));
    }
    for (auto& r : requests) r.wait();
    last = comm.join();
  }
  sameEverywhere(last);
  if (size > 1) {
    EXPECT_NE(last, joiner) << "rank " << joiner << " joined first";
  } else {
    EXPECT_EQ(last, 0);
  }
  // The reference: the same ops, the joiner passing the neutral buffer itself. The ops' names
  // continue their occurrences on every rank (the joiner's too: it adopted the first ones).
  for (size_t c = 0; c < cases.size(); ++c) {
    const Case& k = cases[c];
    std::vector<unsigned char> ref =
        rank == joiner ? neutral(k.dt, k.op, k.count) : data(k.dt, k.count, rank);
    comm.allReduceAsync(ref.data(), ref.data(), k.count, k.dt, k.op, 0,
                        name("ar", k.dt, k.op, k.count))
        .wait();
    if (rank != joiner) {
      EXPECT_EQ(ref, during[c]) << "dtype " << k.dt << " op " << k.op << " count " << k.count;
    }
  }
}

// Broadcast (from a rank that has not joined), reduce, reduce-scatter and barrier are answered.
TEST(Join, BroadcastReduceReduceScatterAndBarrierAreAnswered) {
  const int rank = worldRank(), size = worldSize(), joiner = size - 1;
  if (size < 2) GTEST_SKIP() << "needs a rank that joins and one that does not";
  Communicator comm = Communicator::world();
  const size_t n = 5, p = static_cast<size_t>(size);
  if (rank == joiner) {
    comm.join();
    return;
  }
  std::vector<int32_t> b(n, rank == 0 ? 42 : -1), red(n, -7), send(n * p), part(n, -7);
  for (size_t i = 0; i < n * p; ++i) send[i] = static_cast<int32_t>(100 * rank + i);
  std::vector<int32_t> mine(n, rank + 1);
  auto rb = comm.broadcastAsync(b.data(), b.data(), n, priocclInt32, 0, 1, "join.bcast");
  auto rr =
      comm.reduceAsync(mine.data(), red.data(), n, priocclInt32, priocclSum, 0, 0, "join.reduce");
  auto rs =
      comm.reduceScatterAsync(send.data(), part.data(), n, priocclInt32, priocclMax, 2, "join.rs");
  auto bar = comm.barrierAsync(0, "join.barrier");
  rb.wait();
  rr.wait();
  rs.wait();
  bar.wait();
  for (int32_t v : b) EXPECT_EQ(v, 42);
  int32_t sum = 0;
  for (int r = 0; r < joiner; ++r) sum += r + 1;
  if (rank == 0) {
    for (int32_t v : red) EXPECT_EQ(v, sum) << "the joined rank adds nothing";
  }
  for (size_t i = 0; i < n; ++i)  // the largest non-joined rank's block `rank`
    EXPECT_EQ(part[i],
              static_cast<int32_t>(100 * (joiner - 1) + static_cast<size_t>(rank) * n + i));
  comm.join();
}

// An all-gather and a broadcast from the joined rank cannot be answered: they fail on every rank
// that submitted them, naming the joined rank; the communicator goes on, and after the join the
// same names match on every rank again.
TEST(Join, UnanswerableOpsFailNamingTheJoinedRank) {
  const int rank = worldRank(), size = worldSize(), joiner = size - 1;
  if (size < 2) GTEST_SKIP() << "needs a rank that joins and one that does not";
  Communicator comm = Communicator::world();
  const size_t p = static_cast<size_t>(size);
  std::vector<int32_t> one(1, rank), all(p, -1);
  if (rank != joiner) {
    try {
      comm.allGatherAsync(one.data(), all.data(), 1, priocclInt32, 0, "join.ag").wait();
      ADD_FAILURE() << "an all-gather ran with a joined rank";
    } catch (const prioccl::Error& e) {
      EXPECT_EQ(e.code(), priocclInvalidUsage);
      std::string what = e.what();
      EXPECT_NE(what.find("rank " + std::to_string(joiner) + " had joined"), std::string::npos)
          << what;
    }
    std::vector<int32_t> b(3, 0);
    EXPECT_THROW(
        comm.broadcastAsync(b.data(), b.data(), 3, priocclInt32, joiner, 0, "join.b").wait(),
        prioccl::InvalidUsage)
        << "the root has joined";
    int32_t x = 1;  // the communicator is healthy
    comm.allReduceAsync(&x, &x, 1, priocclInt32, priocclSum, 0, "join.after").wait();
    EXPECT_EQ(x, size - 1);
  }
  int last = sameEverywhere(comm.join());
  EXPECT_NE(last, joiner);
  comm.allGatherAsync(one.data(), all.data(), 1, priocclInt32, 0, "join.ag").wait();
  for (size_t r = 0; r < p; ++r) EXPECT_EQ(all[r], static_cast<int32_t>(r));
  int32_t x = 1;
  comm.allReduceAsync(&x, &x, 1, priocclInt32, priocclSum, 0, "join.after").wait();
  EXPECT_EQ(x, size);
}

// Rank r runs size - r all-reduces of one name, then joins: occurrence j runs on the ranks that
// submitted it, the others answered for; rank 0 (with the most) joins last, and a later op of
// the same name matches on every rank.
TEST(Join, UnevenWorkEndsWithTheBusiestRankLast) {
  const int rank = worldRank(), size = worldSize();
  Communicator comm = Communicator::world();
  for (int j = 0; j < size - rank; ++j) {
    int64_t v = rank + 1;
    comm.allReduceAsync(&v, &v, 1, priocclInt64, priocclSum, 0, "uneven").wait();
    int64_t want = 0;  // ranks r < size - j submitted occurrence j
    for (int r = 0; r < size - j; ++r) want += r + 1;
    EXPECT_EQ(v, want) << "occurrence " << j;
  }
  EXPECT_EQ(sameEverywhere(comm.join()), 0);
  int64_t v = 1;
  comm.allReduceAsync(&v, &v, 1, priocclInt64, priocclSum, 0, "uneven").wait();
  EXPECT_EQ(v, size);
}

// A rank that destroys its communicator without joining can never join: the others' join fails
// at once, naming it (Horovod's suite has a rank leave after a failed test while the other
// waits in join; it waited until the test runner's timeout).
TEST(Join, FailsWhenARankLeavesWithoutJoining) {
  const int rank = worldRank(), size = worldSize(), leaver = size - 1;
  if (size < 2) GTEST_SKIP() << "needs a rank that leaves and one that joins";
  {
    Communicator comm = Communicator::world();
    if (rank != leaver) {
      try {
        comm.join();
        ADD_FAILURE() << "join returned though rank " << leaver << " left without joining";
      } catch (const prioccl::Error& e) {
        EXPECT_EQ(e.code(), priocclRemoteError) << e.what();
        EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(leaver) +
                                             " destroyed its communicator without joining"),
                  std::string::npos)
            << e.what();
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Join, NotInsideAGroup) {
  Communicator comm = Communicator::world();
  prioccl::groupStart();
  EXPECT_THROW(comm.join(), prioccl::InvalidUsage);
  prioccl::groupEnd();
  int last = -1;
  priocclComm_t c = nullptr;
  ASSERT_EQ(priocclCommInitWorld(&c), priocclSuccess);
  EXPECT_EQ(priocclJoin(c, nullptr), priocclInvalidArgument);
  ASSERT_EQ(priocclJoin(c, &last), priocclSuccess);
  EXPECT_GE(last, 0);
  EXPECT_EQ(priocclCommDestroy(c), priocclSuccess);
}

// Same count, different shapes: a mismatch on every rank, named or not; the same shapes run.
TEST(Shape, SameCountDifferentShapesFail) {
  const int rank = worldRank(), size = worldSize();
  priocclComm_t c = nullptr;
  ASSERT_EQ(priocclCommInitWorld(&c), priocclSuccess);
  float x[6] = {1, 2, 3, 4, 5, 6};
  const int64_t wide[] = {2, 3}, tall[] = {3, 2};
  for (bool named : {true, false}) {
    SCOPED_TRACE(named ? "named" : "unnamed");
    ASSERT_EQ(priocclShapeNext(rank == 0 ? wide : tall, 2), priocclSuccess);
    priocclRequest_t req = nullptr;
    priocclResult_t r =
        named
            ? priocclAllReduceNamedAsync(x, x, 6, priocclFloat32, priocclSum, 0, "shaped", c, &req)
            : priocclAllReduceAsync(x, x, 6, priocclFloat32, priocclSum, 0, c, &req);
    ASSERT_EQ(r, priocclSuccess);
    r = priocclWait(req);
    if (size == 1) {
      EXPECT_EQ(r, priocclSuccess);
      continue;
    }
    EXPECT_EQ(r, priocclInvalidUsage);
    std::string what = priocclGetLastError(c);
    EXPECT_NE(what.find("tensor shape digest"), std::string::npos) << what;
  }
  // The same shape everywhere; then a shape left by a call that failed is not carried over to the
  // next op (which gives none, like the other ranks').
  ASSERT_EQ(priocclShapeNext(wide, 2), priocclSuccess);
  EXPECT_EQ(priocclAllReduce(x, x, 6, priocclFloat32, priocclSum, c), priocclSuccess);
  ASSERT_EQ(priocclShapeNext(tall, rank == 0 ? 2 : 1), priocclSuccess);
  EXPECT_EQ(priocclAllReduce(nullptr, x, 6, priocclFloat32, priocclSum, c), priocclInvalidArgument);
  EXPECT_EQ(priocclAllReduce(x, x, 6, priocclFloat32, priocclSum, c), priocclSuccess);
  // Bad shapes are refused at once.
  EXPECT_EQ(priocclShapeNext(nullptr, 2), priocclInvalidArgument);
  EXPECT_EQ(priocclShapeNext(wide, -1), priocclInvalidArgument);
  const int64_t negative[] = {2, -3};
  EXPECT_EQ(priocclShapeNext(negative, 2), priocclInvalidArgument);
  EXPECT_EQ(priocclAllReduce(x, x, 6, priocclFloat32, priocclSum, c), priocclSuccess)
      << "a refused shape is not recorded";
  EXPECT_EQ(priocclCommDestroy(c), priocclSuccess);
}

// startTimeline/stopTimeline (Horovod's start_timeline): the file gets this rank's ops while it is
// on, is valid JSON after the stop, and gets nothing afterwards; an unwritable path is an error.
TEST(Timeline, StartsAndStopsAtRunTime) {
  const int rank = worldRank();
  int job = static_cast<int>(getpid());
  MPI_Bcast(&job, 1, MPI_INT, 0, MPI_COMM_WORLD);
  Communicator comm = Communicator::world();
  const std::string path = "/tmp/prioccl-test-timeline-" + std::to_string(job) + ".%r.json";
  const std::string file = comm.startTimeline(path);
  // %r is the rank; this process's earlier communicators add ".comm<n>".
  EXPECT_EQ(file.rfind(path.substr(0, path.find("%r")) + std::to_string(rank) + ".", 0), 0u)
      << file;
  std::vector<float> x(1 << 18, 1.0f);  // 1 MiB: several chunks
  for (int i = 0; i < 3; ++i)
    comm.allReduceAsync(x.data(), x.data(), x.size(), priocclFloat32, priocclSum, 0).wait();
  comm.stopTimeline();
  auto read = [&] {
    std::ifstream in(file);
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
  };
  std::string text = read();
  ASSERT_FALSE(text.empty()) << file;
  EXPECT_EQ(text.front(), '[');
  EXPECT_EQ(text.back() == '\n' ? text[text.size() - 2] : text.back(), ']') << "closed JSON";
  EXPECT_NE(text.find("\"QUEUE\""), std::string::npos);
  if (worldSize() > 1) {
    // Step machines send; a collective backend (PRIOCCL_TRANSPORT=mpi-coll) launches.
    EXPECT_TRUE(text.find("\"SEND\"") != std::string::npos ||
                text.find("\"COLL\"") != std::string::npos);
  }
  comm.allReduceAsync(x.data(), x.data(), x.size(), priocclFloat32, priocclSum, 0).wait();
  EXPECT_EQ(read(), text) << "nothing written after the stop";
  std::remove(file.c_str());
  EXPECT_THROW(comm.startTimeline("/nonexistent-dir-of-prioccl/x.json"), prioccl::SystemError);
  EXPECT_THROW(comm.startTimeline(""), prioccl::InvalidArgument);
  priocclComm_t c = nullptr;
  ASSERT_EQ(priocclCommInitWorld(&c), priocclSuccess);
  EXPECT_EQ(priocclTimelineStart(c, nullptr), priocclInvalidArgument);
  EXPECT_EQ(priocclTimelineStop(c), priocclSuccess) << "stopping without a timeline is fine";
  EXPECT_EQ(priocclCommDestroy(c), priocclSuccess);
}

}  // namespace
