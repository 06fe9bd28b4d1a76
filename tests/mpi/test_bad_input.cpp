// Bad input through the C ABI: every case returns a clear code and message, never a crash or
// hang, and the communicator keeps working afterwards.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "mpi_test_util.h"
#include "prioccl/prioccl.h"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::test::rawEnum;

class BadInput : public testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(priocclCommInitWorld(&comm), priocclSuccess); }
  void TearDown() override {
    if (comm) {
      EXPECT_EQ(priocclCommDestroy(comm), priocclSuccess);
    }
  }
  // The call failed with `code` and priocclGetLastError names `needle`.
  void expectError(priocclResult_t got, priocclResult_t code, const char* needle) {
    EXPECT_EQ(got, code) << priocclGetErrorString(got);
    std::string msg = priocclGetLastError(comm);
    EXPECT_NE(msg.find(needle), std::string::npos) << "message was: " << msg;
  }
  // A correct all-reduce still works after the bad call.
  void expectStillWorks() {
    int size = 0;
    ASSERT_EQ(priocclCommSize(comm, &size), priocclSuccess);
    std::vector<int32_t> v(1000, 3);
    ASSERT_EQ(priocclAllReduce(v.data(), v.data(), v.size(), priocclInt32, priocclSum, comm),
              priocclSuccess);
    EXPECT_EQ(v[999], 3 * size);
  }
  priocclComm_t comm = nullptr;
  float buf[16] = {};
};

TEST_F(BadInput, NullPointers) {
  priocclRequest_t req;
  int x;
  expectError(priocclCommInitWorld(nullptr), priocclInvalidArgument, "comm is NULL");
  expectError(priocclCommRank(comm, nullptr), priocclInvalidArgument, "rank is NULL");
  expectError(priocclCommSize(comm, nullptr), priocclInvalidArgument, "size is NULL");
  expectError(priocclCommRank(nullptr, &x), priocclInvalidArgument, "comm is NULL");
  expectError(priocclAllReduce(nullptr, buf, 4, priocclFloat32, priocclSum, comm),
              priocclInvalidArgument, "sendbuf is null");
  expectError(priocclAllReduce(buf, nullptr, 4, priocclFloat32, priocclSum, comm),
              priocclInvalidArgument, "recvbuf is null");
  expectError(priocclAllReduceAsync(buf, buf, 4, priocclFloat32, priocclSum, 0, comm, nullptr),
              priocclInvalidArgument, "request is NULL");
  expectError(priocclTest(nullptr, &x), priocclInvalidArgument, "request is NULL");
  expectError(priocclWait(nullptr), priocclInvalidArgument, "request is NULL");
  expectError(priocclGetVersion(nullptr), priocclInvalidArgument, "version is NULL");
  // Null buffers are fine with count 0, and such an op completes at once.
  ASSERT_EQ(priocclAllReduceAsync(nullptr, nullptr, 0, priocclFloat32, priocclSum, 0, comm, &req),
            priocclSuccess);
  EXPECT_EQ(priocclWait(req), priocclSuccess);
  expectStillWorks();
}

TEST_F(BadInput, InvalidEnums) {
  expectError(priocclAllReduce(buf, buf, 4, rawEnum<priocclDataType_t>(42), priocclSum, comm),
              priocclInvalidArgument, "invalid datatype 42");
  expectError(priocclAllReduce(buf, buf, 4, rawEnum<priocclDataType_t>(-1), priocclSum, comm),
              priocclInvalidArgument, "invalid datatype -1");
  expectError(priocclAllReduce(buf, buf, 4, priocclFloat32, rawEnum<priocclRedOp_t>(9), comm),
              priocclInvalidArgument, "invalid reduction op 9");
  expectStillWorks();
}

TEST_F(BadInput, OverlapAndOverflow) {
  expectError(priocclAllReduce(buf, buf + 1, 4, priocclFloat32, priocclSum, comm),
              priocclInvalidArgument, "overlap");
  expectError(priocclAllReduce(buf, buf, SIZE_MAX / 2, priocclFloat32, priocclSum, comm),
              priocclInvalidArgument, "overflows");
  expectStillWorks();
}

TEST_F(BadInput, RequestReleasedByWait) {
  priocclRequest_t req;
  int done = 0;
  ASSERT_EQ(priocclAllReduceAsync(buf, buf, 16, priocclFloat32, priocclSum, 5, comm, &req),
            priocclSuccess);
  EXPECT_EQ(priocclWait(req), priocclSuccess);
  expectError(priocclWait(req), priocclInvalidUsage, "not live");
  expectError(priocclTest(req, &done), priocclInvalidUsage, "not live");
  expectError(priocclWait(reinterpret_cast<priocclRequest_t>(0x1234)), priocclInvalidUsage,
              "not live");
  // A communicator handle is not a request.
  expectError(priocclWait(reinterpret_cast<priocclRequest_t>(comm)), priocclInvalidUsage,
              "not live");
  expectStillWorks();
}

TEST_F(BadInput, TestPollsUntilDone) {
  priocclRequest_t req;
  std::vector<double> v(300000, 1.5);
  ASSERT_EQ(priocclAllReduceAsync(v.data(), v.data(), v.size(), priocclFloat64, priocclMax, -7,
                                  comm, &req),
            priocclSuccess);
  int done = 0;
  while (!done) ASSERT_EQ(priocclTest(req, &done), priocclSuccess);
  EXPECT_EQ(priocclTest(req, &done), priocclSuccess);  // Test never releases
  EXPECT_EQ(done, 1);
  EXPECT_EQ(priocclWait(req), priocclSuccess);
  EXPECT_EQ(v[12345], 1.5);
}

TEST_F(BadInput, UseAfterDestroy) {
  priocclComm_t dead = comm;
  ASSERT_EQ(priocclCommDestroy(comm), priocclSuccess);
  comm = nullptr;
  int x;
  priocclRequest_t req;
  EXPECT_EQ(priocclCommRank(dead, &x), priocclInvalidUsage);
  EXPECT_NE(std::string(priocclGetLastError(dead)).find("not a live communicator"),
            std::string::npos);
  EXPECT_EQ(priocclAllReduce(buf, buf, 4, priocclFloat32, priocclSum, dead), priocclInvalidUsage);
  EXPECT_EQ(priocclAllReduceAsync(buf, buf, 4, priocclFloat32, priocclSum, 0, dead, &req),
            priocclInvalidUsage);
  EXPECT_EQ(priocclCommDestroy(dead), priocclInvalidUsage);
  EXPECT_EQ(priocclCommSize(reinterpret_cast<priocclComm_t>(0x999), &x), priocclInvalidUsage);
}

TEST_F(BadInput, RequestsOutliveTheirCommunicator) {
  priocclRequest_t req;
  std::vector<float> v(100000, 2.0f);
  ASSERT_EQ(priocclAllReduceAsync(v.data(), v.data(), v.size(), priocclFloat32, priocclSum, 0, comm,
                                  &req),
            priocclSuccess);
  ASSERT_EQ(priocclCommDestroy(comm), priocclSuccess);  // drains the pending op
  comm = nullptr;
  EXPECT_EQ(priocclWait(req), priocclSuccess);
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(v[99999], 2.0f * size);
}

TEST_F(BadInput, BadConfig) {
  priocclComm_t other = nullptr;
  priocclConfig_t cfg = PRIOCCL_CONFIG_INITIALIZER;
  cfg.chunkBytes = -5;
  EXPECT_EQ(priocclCommInitMPI(&other, nullptr, &cfg), priocclInvalidArgument);
  EXPECT_NE(std::string(priocclGetLastError(nullptr)).find("chunkBytes"), std::string::npos);
  EXPECT_EQ(other, nullptr);
  priocclConfig_t wrongSize = PRIOCCL_CONFIG_INITIALIZER;
  wrongSize.size = 3;
  EXPECT_EQ(priocclCommInitMPI(&other, nullptr, &wrongSize), priocclInvalidArgument);
  // A valid explicit config works (collective: every rank does the same).
  priocclConfig_t good = PRIOCCL_CONFIG_INITIALIZER;
  good.chunkBytes = 1000;
  good.windowChunks = 4;
  ASSERT_EQ(priocclCommInitMPI(&other, nullptr, &good), priocclSuccess);
  std::vector<int64_t> v(12345, 1);
  EXPECT_EQ(priocclAllReduce(v.data(), v.data(), v.size(), priocclInt64, priocclSum, other),
            priocclSuccess);
  int size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(v[12344], size);
  EXPECT_EQ(priocclCommDestroy(other), priocclSuccess);
}

TEST_F(BadInput, TransportChoiceIsCheckedOnEveryRank) {
  priocclComm_t other = nullptr;
  priocclConfig_t cfg = PRIOCCL_CONFIG_INITIALIZER;
  cfg.transport = 7;
  EXPECT_EQ(priocclCommInitMPI(&other, nullptr, &cfg), priocclInvalidArgument);
  EXPECT_NE(std::string(priocclGetLastError(nullptr)).find("transport"), std::string::npos);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) GTEST_SKIP() << "needs 2 ranks to disagree";
  // Rank 0 asks for the other transport than the rest: every rank fails creation, none waits.
  priocclConfig_t mixed = PRIOCCL_CONFIG_INITIALIZER;
  mixed.transport = rank == 0 ? priocclTransportUcx : priocclTransportMpi;
  EXPECT_EQ(priocclCommInitMPI(&other, nullptr, &mixed), priocclInvalidUsage);
  EXPECT_NE(std::string(priocclGetLastError(nullptr)).find("disagree on the transport"),
            std::string::npos)
      << priocclGetLastError(nullptr);
  EXPECT_EQ(other, nullptr);
  expectStillWorks();
}

TEST_F(BadInput, MismatchedOpsFailOnEveryRankAndSpareTheRest) {
  // Ranks disagree on the count of one op: every rank gets priocclInvalidUsage from that op with
  // a message naming both sides, before any data moves; the ops around it are unaffected.
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) GTEST_SKIP() << "needs 2 ranks to disagree";
  std::vector<float> before(5000, 1.0f), bad(rank == 0 ? 1000 : 1200, 1.0f), after(7000, 2.0f);
  std::vector<int32_t> named(64, rank);
  priocclRequest_t r1, r2, r3, r4;
  ASSERT_EQ(priocclAllReduceAsync(before.data(), before.data(), before.size(), priocclFloat32,
                                  priocclSum, 3, comm, &r1),
            priocclSuccess);
  ASSERT_EQ(priocclAllReduceAsync(bad.data(), bad.data(), bad.size(), priocclFloat32, priocclSum, 0,
                                  comm, &r2),
            priocclSuccess);
  ASSERT_EQ(priocclAllReduceAsync(after.data(), after.data(), after.size(), priocclFloat32,
                                  priocclSum, 1, comm, &r3),
            priocclSuccess);
  // A named op whose datatype differs on the last rank.
  ASSERT_EQ(priocclAllReduceNamedAsync(named.data(), named.data(), named.size(),
                                       rank == size - 1 ? priocclUint8 : priocclInt32, priocclMax,
                                       0, "layer7.bias", comm, &r4),
            priocclSuccess);
  EXPECT_EQ(priocclWait(r1), priocclSuccess);
  EXPECT_EQ(priocclWait(r2), priocclInvalidUsage);
  std::string msg = priocclGetLastError(comm);
  EXPECT_NE(msg.find("Mismatched allreduce #1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("had count 1000"), std::string::npos) << msg;
  EXPECT_NE(msg.find("had count 1200"), std::string::npos) << msg;
  EXPECT_EQ(priocclWait(r3), priocclSuccess);
  EXPECT_EQ(priocclWait(r4), priocclInvalidUsage);
  msg = priocclGetLastError(comm);
  EXPECT_NE(msg.find("Mismatched allreduce 'layer7.bias'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("int32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("uint8"), std::string::npos) << msg;
  EXPECT_EQ(before[4999], 1.0f * size);
  EXPECT_EQ(after[6999], 2.0f * size);
  expectStillWorks();
}

TEST_F(BadInput, MismatchedSmallOpsOnDifferentExchangesFailEverywhereUntouched) {
  // Small unnamed ops ride in their agreement: on recursive doubling's rounds or halving-doubling's
  // by size. Ranks that disagree on the count may even run different ones; every rank still fails
  // the op with both counts named, its receive buffer untouched, and the next ops work.
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) GTEST_SKIP() << "needs 2 ranks to disagree";
  prioccl::Config cfg = prioccl::Config::fromEnv();
  cfg.algorithm = priocclAlgoAuto;
  cfg.algorithmRules = "rd<16K,hd<64K,ring";
  prioccl::Communicator c = prioccl::Communicator::world(cfg);
  // rd against hd (12000 B and 20000 B), then hd against hd (24000 B and 28000 B).
  for (auto counts : {std::pair<size_t, size_t>{3000, 5000}, {6000, 7000}}) {
    for (bool blocking : {true, false}) {
      size_t count = rank == 0 ? counts.first : counts.second;
      SCOPED_TRACE("count " + std::to_string(count) + (blocking ? " blocking" : " async"));
      std::vector<float> send(count, 1.0f), recv(count, -7.0f);
      priocclResult_t rc = priocclSuccess;
      std::string msg;
      try {
        if (blocking)
          c.allReduce(send.data(), recv.data(), count, priocclFloat32, priocclSum);
        else
          c.allReduceAsync(send.data(), recv.data(), count, priocclFloat32, priocclSum, 2).wait();
      } catch (const prioccl::Error& e) {
        rc = e.code();
        msg = e.what();
      }
      EXPECT_EQ(rc, priocclInvalidUsage);
      EXPECT_NE(msg.find("Mismatched allreduce"), std::string::npos) << msg;
      EXPECT_NE(msg.find("had count " + std::to_string(counts.first)), std::string::npos) << msg;
      EXPECT_NE(msg.find("had count " + std::to_string(counts.second)), std::string::npos) << msg;
      EXPECT_EQ(std::count(recv.begin(), recv.end(), -7.0f), static_cast<long>(count));
      std::vector<float> ok(counts.second, 1.0f);
      c.allReduce(ok.data(), ok.data(), ok.size(), priocclFloat32, priocclSum);
      EXPECT_EQ(ok.front(), 1.0f * size);
      EXPECT_EQ(ok.back(), 1.0f * size);
    }
  }
  c.destroy();
}

TEST(CppApi, ThrowsTypedExceptions) {
  prioccl::Communicator comm = prioccl::Communicator::world();
  float x = 1;
  EXPECT_THROW(comm.allReduce(&x, &x, 1, rawEnum<priocclDataType_t>(99), priocclSum),
               prioccl::InvalidArgument);
  prioccl::Request empty;
  EXPECT_THROW(empty.wait(), prioccl::InvalidUsage);
  prioccl::Communicator copy = comm;
  comm.destroy();
  EXPECT_THROW(copy.rank(), prioccl::InvalidUsage);
  EXPECT_FALSE(copy.valid());
}

}  // namespace
