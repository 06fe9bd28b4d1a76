// Faults between live ranks: an op some rank never submits times out with a message naming that
// rank; priocclCommAbort from another thread frees a stuck waiter at once and the other ranks
// learn of it; a point-to-point size mismatch fails both sides; a stalled op gets a warning. Every
// case ends with every rank's later ops failing at once and a prompt destroy. (Killed ranks:
// tests/fault.)
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "mpi_test_util.h"
#include "prioccl/prioccl.h"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::test::worldRank;
using prioccl::test::worldSize;

using Clock = std::chrono::steady_clock;
using prioccl::Communicator;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Communicator makeComm(double timeoutSeconds, double stallWarnSeconds = 0) {
  prioccl::Config cfg = prioccl::Config::fromEnv();
  cfg.timeoutSeconds = timeoutSeconds;
  cfg.stallWarnSeconds = stallWarnSeconds;
  return Communicator::world(cfg);
}

// Waits on `r`; returns its result code and message.
priocclResult_t outcome(const prioccl::Request& r, std::string* message) {
  try {
    r.wait();
    *message = "";
    return priocclSuccess;
  } catch (const prioccl::Error& e) {
    *message = e.what();
    return e.code();
  }
}

// A blocking 16-float sum (the inline path on an idle engine); returns its result code and message.
priocclResult_t blockingOutcome(Communicator& comm, std::string* message) {
  std::vector<float> v(16, 1.0f);
  try {
    comm.allReduce(v.data(), v.data(), v.size(), priocclFloat32, priocclSum);
    *message = "";
    return priocclSuccess;
  } catch (const prioccl::Error& e) {
    *message = e.what();
    return e.code();
  }
}

// Waits (idle, submitting nothing) until another rank's failure has reached this rank's
// communicator, at most `seconds`; false if it never did.
bool waitUntilFailed(Communicator& comm, double seconds) {
  Clock::time_point t = Clock::now();
  while (comm.asyncError() == priocclSuccess) {
    if (since(t) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// The communicator is failed: a later op fails at once, and destroy returns promptly.
void expectFailedForGood(Communicator& comm) {
  std::vector<float> v(16, 1.0f);
  Clock::time_point t = Clock::now();
  EXPECT_THROW(comm.allReduce(v.data(), v.data(), v.size(), priocclFloat32, priocclSum),
               prioccl::Error);
  EXPECT_LT(since(t), 1.0);
  t = Clock::now();
  comm.destroy();
  EXPECT_LT(since(t), 5.0);
}

// A blocking op is driven by the calling thread; when it leaves, the idle engine's progress
// thread must still come back for the heartbeats, or every peer declares this rank lost.
TEST(Faults, RanksIdleAfterBlockingOpsAreNotDeclaredLost) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  const double timeout = 1;
  Communicator comm = makeComm(timeout);
  std::vector<float> v(16, 1.0f);
  for (int i = 0; i < 3; ++i)
    comm.allReduce(v.data(), v.data(), v.size(), priocclFloat32, priocclSum);
  std::this_thread::sleep_for(std::chrono::duration<double>(3.5 * timeout));  // all idle
  std::fill(v.begin(), v.end(), 1.0f);
  EXPECT_NO_THROW(comm.allReduce(v.data(), v.data(), v.size(), priocclFloat32, priocclSum));
  EXPECT_EQ(v[0], static_cast<float>(worldSize()));
  comm.destroy();
}

TEST(Faults, OpNobodyElseSubmitsTimesOutNamingTheMissingRanks) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  const double timeout = 2;
  Communicator comm = makeComm(timeout);
  std::vector<float> v(1024, 1.0f);
  std::string msg;
  Clock::time_point t = Clock::now();
  if (worldRank() == 0) {  // the coordinator knows who has not submitted a named op
    prioccl::Request r =
        comm.allReduceAsync(v.data(), v.data(), v.size(), priocclFloat32, priocclSum, 0, "lonely");
    EXPECT_EQ(outcome(r, &msg), priocclTimeout);
    std::string missing = "ranks 1";
    EXPECT_NE(msg.find("'lonely'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(missing), std::string::npos) << msg;
    EXPECT_NE(msg.find("have not submitted it"), std::string::npos) << msg;
  } else {  // idle meanwhile (an op of theirs would time out too); then the communicator is failed
    std::this_thread::sleep_for(std::chrono::duration<double>(timeout + 1.5));
    prioccl::Request r = comm.allReduceAsync(v.data(), v.data(), v.size(), priocclFloat32,
                                             priocclSum, 0, "afterwards");
    EXPECT_EQ(outcome(r, &msg), priocclRemoteError);
    EXPECT_NE(msg.find("rank 0 failed the communicator"), std::string::npos) << msg;
  }
  double took = since(t);
  EXPECT_GT(took, timeout * 0.9);
  EXPECT_LT(took, timeout + 5);
  expectFailedForGood(comm);
}

TEST(Faults, AbortFromAnotherThreadFreesTheWaiterAndTellsTheOthers) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  Communicator comm = makeComm(60);  // far beyond the test: only the abort may end it
  std::vector<float> v(1024, 1.0f);
  std::string msg;
  Clock::time_point t = Clock::now();
  std::string key = worldRank() == 0 ? "never-a" : "never-b";  // no op ever completes
  prioccl::Request r =
      comm.allReduceAsync(v.data(), v.data(), v.size(), priocclFloat32, priocclSum, 0, key);
  std::thread aborter;
  if (worldRank() == 0)
    aborter = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.abort();
      comm.abort();  // idempotent
    });
  priocclResult_t code = outcome(r, &msg);
  if (aborter.joinable()) aborter.join();
  if (worldRank() == 0) {
    EXPECT_EQ(code, priocclInvalidUsage);
    EXPECT_NE(msg.find("aborted"), std::string::npos) << msg;
  } else {
    EXPECT_EQ(code, priocclRemoteError);
    EXPECT_NE(msg.find("rank 0 failed the communicator"), std::string::npos) << msg;
    EXPECT_NE(msg.find("aborted"), std::string::npos) << msg;
  }
  EXPECT_LT(since(t), 5.0);
  expectFailedForGood(comm);
}

// A small blocking unnamed op on an idle engine runs inline (engine_inline.cpp): it must time out
// naming the peer it waits for, and an abort from another thread must free its waiter at once.
TEST(Faults, InlineOpTimesOutNamingThePeerItWaitsFor) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  const double timeout = 2;
  Communicator comm = makeComm(timeout);
  // Every rank reads the same setting: they all skip or all run.
  if (comm.config().transport == priocclTransportMpiColl)
    GTEST_SKIP() << "mpi-coll has no inline path (every op goes through the coordinator, whose "
                    "timeout message OpNobodyElseSubmitsTimesOutNamingTheMissingRanks checks)";
  Clock::time_point t = Clock::now();
  if (worldRank() == 0) {
    std::string msg;
    EXPECT_EQ(blockingOutcome(comm, &msg), priocclTimeout);
    EXPECT_NE(msg.find("#0 (unnamed"), std::string::npos) << msg;
    EXPECT_NE(msg.find("waiting for data from rank(s) 1"), std::string::npos) << msg;
    EXPECT_GT(since(t), timeout * 0.9);
    EXPECT_LT(since(t), timeout + 5);
  } else {
    // Idle until rank 0's abort notice has failed this communicator. Not a fixed sleep: an op
    // submitted before the notice arrives matches rank 0's op #0, whose data left before its
    // timeout, and succeeds (seen under TSan with the machine overloaded, 2026-11-29).
    EXPECT_TRUE(waitUntilFailed(comm, timeout + 30)) << "rank 0's failure never arrived";
  }
  expectFailedForGood(comm);
}

TEST(Faults, AbortFreesAWaiterOnTheInlinePath) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  Communicator comm = makeComm(60);  // only the abort may end it
  std::vector<float> v(16, 1.0f);
  Clock::time_point t = Clock::now();
  if (worldRank() == 0) {
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.abort();
    });
    std::string msg;
    EXPECT_EQ(blockingOutcome(comm, &msg), priocclInvalidUsage);
    aborter.join();
    EXPECT_NE(msg.find("aborted"), std::string::npos) << msg;
  } else {  // rank 0's notice fails this rank's communicator; its next op says so
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    std::string msg;
    // Named: an unnamed op would match rank 0's, whose message may have left before the abort,
    // and complete correctly here.
    prioccl::Request r = comm.allReduceAsync(v.data(), v.data(), v.size(), priocclFloat32,
                                             priocclSum, 0, "after-the-abort");
    EXPECT_EQ(outcome(r, &msg), priocclRemoteError);
    EXPECT_NE(msg.find("rank 0 failed the communicator"), std::string::npos) << msg;
  }
  EXPECT_LT(since(t), 5.0);
  expectFailedForGood(comm);
}

// A rank that fails the communicator and destroys it at once, closing its endpoints, while the
// others are idle (they poll once per heartbeat period, 1 s here): every other rank must still
// report its reason, not the closing of its endpoints (issue 40).
TEST(Faults, ReasonOfARankThatDestroysAtOnceReachesIdleRanks) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int failing = worldSize() - 1;  // not the coordinator: rank 0 relays its reason
  Communicator comm = makeComm(30);
  std::vector<float> v(16, 1.0f);
  comm.allReduce(v.data(), v.data(), v.size(), priocclFloat32, priocclSum);  // endpoints in use
  MPI_Barrier(MPI_COMM_WORLD);
  Clock::time_point t = Clock::now();
  if (worldRank() == failing) {
    comm.abort();
    comm.destroy();
    EXPECT_LT(since(t), 5.0);
    return;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // idle meanwhile
  std::string msg;
  prioccl::Request r = comm.allReduceAsync(v.data(), v.data(), v.size(), priocclFloat32, priocclSum,
                                           0, "after-the-destroy");
  EXPECT_EQ(outcome(r, &msg), priocclRemoteError) << msg;
  EXPECT_NE(msg.find("rank " + std::to_string(failing) + " failed the communicator"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("aborted"), std::string::npos) << msg;
  expectFailedForGood(comm);
}

TEST(Faults, PointToPointSizeMismatchFailsBothSides) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  Communicator comm = makeComm(10);
  // Every rank is done creating it (PRIOCCL_CALIBRATE's ops) before rank 1 fails it: a creation
  // still under way would fail, at 4 ranks, instead of the op below.
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<float> buf(4096, 1.0f);
  std::string msg;
  Clock::time_point t = Clock::now();
  if (worldRank() == 0) {
    comm.sendAsync(buf.data(), buf.size(), priocclFloat32, 1).status();  // may even complete
  } else if (worldRank() == 1) {
    prioccl::Request r = comm.recvAsync(buf.data(), 100, priocclFloat32, 0);
    EXPECT_EQ(outcome(r, &msg), priocclRemoteError) << msg;
  }
  // Every rank, the sender included, learns of the failure through the next collective.
  std::vector<float> v(16, 1.0f);
  prioccl::Request r =
      comm.allReduceAsync(v.data(), v.data(), v.size(), priocclFloat32, priocclSum);
  EXPECT_NE(outcome(r, &msg), priocclSuccess);
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_LT(since(t), 10.0);
  expectFailedForGood(comm);
}

// A send shorter or longer than its receive by whole chunks: every chunk the two share matches
// exactly, so only the total length in the first chunk's header tells. Both sides must fail well
// before the 30 s timeout, the receiver naming both lengths.
class PointToPointWholeChunks : public ::testing::TestWithParam<bool> {};

TEST_P(PointToPointWholeChunks, MismatchFailsBothSidesPromptly) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  const bool sendShorter = GetParam();
  prioccl::Config cfg = prioccl::Config::fromEnv();
  cfg.timeoutSeconds = 30;
  cfg.chunkBytes = 256 << 10;  // both lengths cut into the same 256 KiB chunks
  Communicator comm = Communicator::world(cfg);
  MPI_Barrier(MPI_COMM_WORLD);  // every rank done creating it (see above)
  const size_t shortCount = (2 << 20) / sizeof(float), longCount = 2 * shortCount;
  std::vector<float> buf(longCount, 1.0f);
  std::string msg;
  Clock::time_point t = Clock::now();
  if (worldRank() == 0) {
    prioccl::Request r =
        comm.sendAsync(buf.data(), sendShorter ? shortCount : longCount, priocclFloat32, 1);
    // A shorter send may complete (every chunk it has was received); a longer one cannot.
    priocclResult_t code = outcome(r, &msg);
    if (!sendShorter || code != priocclSuccess) {
      EXPECT_EQ(code, priocclRemoteError) << msg;
    }
  } else if (worldRank() == 1) {
    prioccl::Request r =
        comm.recvAsync(buf.data(), sendShorter ? longCount : shortCount, priocclFloat32, 0);
    EXPECT_EQ(outcome(r, &msg), priocclRemoteError) << msg;
    EXPECT_NE(msg.find("point-to-point size mismatch: rank 0 sends " +
                       std::to_string((sendShorter ? shortCount : longCount) * sizeof(float)) +
                       " bytes to rank 1, whose receive expects " +
                       std::to_string((sendShorter ? longCount : shortCount) * sizeof(float))),
              std::string::npos)
        << msg;
  }
  std::vector<float> v(16, 1.0f);
  prioccl::Request r =
      comm.allReduceAsync(v.data(), v.data(), v.size(), priocclFloat32, priocclSum);
  EXPECT_NE(outcome(r, &msg), priocclSuccess);
  EXPECT_NE(msg.find("point-to-point size mismatch"), std::string::npos) << msg;
  EXPECT_LT(since(t), 10.0);
  expectFailedForGood(comm);
}

INSTANTIATE_TEST_SUITE_P(Faults, PointToPointWholeChunks, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "SendShorter" : "SendLonger";
                         });

TEST(Faults, StalledOpGetsAWarningNamingWhatItWaitsFor) {
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks";
  // The warning goes to stderr whatever PRIOCCL_DEBUG says: capture it in a file.
  char path[] = "/tmp/prioccl_stall_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  {
    Communicator comm = makeComm(3, 1);
    std::vector<float> v(1024, 1.0f);
    std::string msg;
    // Rank 1 submits late: rank 0's op stalls for ~1.5 s (warned), then completes.
    if (worldRank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    prioccl::Request r =
        comm.allReduceAsync(v.data(), v.data(), v.size(), priocclFloat32, priocclSum, 0, "late");
    EXPECT_EQ(outcome(r, &msg), priocclSuccess) << msg;
    EXPECT_EQ(v[0], static_cast<float>(worldSize()));
    comm.destroy();
  }
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string text;
  char chunk[4096];
  ssize_t n;
  lseek(fd, 0, SEEK_SET);
  while ((n = read(fd, chunk, sizeof chunk)) > 0) text.append(chunk, static_cast<size_t>(n));
  close(fd);
  unlink(path);
  if (worldRank() == 0) {
    EXPECT_NE(text.find("stalled for"), std::string::npos) << text;
    EXPECT_NE(text.find("'late'"), std::string::npos) << text;
    EXPECT_NE(text.find("ranks 1"), std::string::npos) << text;
  }
}

TEST(Faults, AbortArguments) {
  EXPECT_EQ(priocclCommAbort(nullptr), priocclInvalidArgument);
  priocclComm_t comm = nullptr;
  ASSERT_EQ(priocclCommInitWorld(&comm), priocclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);  // an abort during another rank's creation would fail that
  EXPECT_EQ(priocclCommAbort(comm), priocclSuccess);
  EXPECT_EQ(priocclCommAbort(comm), priocclSuccess);
  float x = 1;
  // InvalidUsage here, or RemoteError when another rank's abort arrived first.
  EXPECT_NE(priocclAllReduce(&x, &x, 1, priocclFloat32, priocclSum, comm), priocclSuccess);
  EXPECT_NE(std::string(priocclGetLastError(comm)).find("aborted"), std::string::npos);
  EXPECT_EQ(priocclCommDestroy(comm), priocclSuccess);
  EXPECT_EQ(priocclCommAbort(comm), priocclInvalidUsage);  // a dead handle
}

}  // namespace
