// The collectives' argument rules (src/api/op_rules.h) without a communicator: every kind's
// extents, NCCL's root semantics, in-place forms, and each bad argument's error naming the
// collective and the argument.
#include "api/op_rules.h"

#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "api/ragged.h"
#include "prioccl/prioccl.hpp"

namespace prioccl::detail {
namespace {

using Kind = OpState::Kind;

constexpr int kSize = 4;

// The message of the Error that `check` throws (and that it is priocclInvalidArgument), or "".
template <typename F>
std::string refusal(F check) {
  try {
    check();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), priocclInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

std::string refuse(const OpDesc& a, int rank = 1) {
  return refusal([&] { checkCollective(a, rank, kSize); });
}

std::string refuseV(const OpDesc& a, int rank = 1) {
  return refusal([&] { checkCollectiveV(a, rank, kSize); });
}

TEST(CollectiveRules, ExtentsOfEveryKind) {
  std::vector<float> send(64), recv(64);
  struct Case {
    Kind kind;
    size_t sendBytes, recvBytes;
  };
  // count 4 floats: blocked kinds read or write 4 blocks of 16 bytes.
  for (Case c : {Case{Kind::kAllReduce, 16, 16}, Case{Kind::kAllGather, 16, 64},
                 Case{Kind::kReduceScatter, 64, 16}, Case{Kind::kAllToAll, 64, 64}}) {
    CollectiveExtents x = checkCollective(
        collectiveOp(c.kind, send.data(), recv.data(), 4, priocclFloat32, priocclSum, -1), 1,
        kSize);
    EXPECT_EQ(x.sendBytes, c.sendBytes) << kindName(c.kind);
    EXPECT_EQ(x.recvBytes, c.recvBytes) << kindName(c.kind);
    EXPECT_EQ(x.root, -1) << kindName(c.kind);
    EXPECT_EQ(x.send, send.data());
    EXPECT_EQ(x.recv, recv.data());
  }
  // A barrier and empty ops need no buffers.
  for (Kind k : {Kind::kBarrier, Kind::kAllReduce, Kind::kAllGather, Kind::kAllToAll}) {
    CollectiveExtents x = checkCollective(
        collectiveOp(k, nullptr, nullptr, 0, priocclInt8, priocclSum, -1), 0, kSize);
    EXPECT_EQ(x.sendBytes + x.recvBytes, 0u) << kindName(k);
  }
}

TEST(CollectiveRules, OnlyTheRootReadsABroadcastAndWritesAReduce) {
  std::vector<double> send(8), recv(8);
  // Not the root: the other buffer is ignored, whatever it is.
  CollectiveExtents b =
      checkCollective(collectiveOp(Kind::kBroadcast, reinterpret_cast<void*>(0x10), recv.data(), 8,
                                   priocclFloat64, priocclSum, 2),
                      1, kSize);
  EXPECT_EQ(b.root, 2);
  EXPECT_EQ(b.send, nullptr);
  EXPECT_EQ(b.sendBytes, 0u);
  EXPECT_EQ(b.recvBytes, 64u);
  CollectiveExtents r = checkCollective(
      collectiveOp(Kind::kReduce, send.data(), nullptr, 8, priocclFloat64, priocclSum, 2), 1,
      kSize);
  EXPECT_EQ(r.recv, nullptr);
  EXPECT_EQ(r.recvBytes, 0u);
  EXPECT_EQ(r.sendBytes, 64u);
  // The root needs them.
  EXPECT_EQ(refuse(collectiveOp(Kind::kBroadcast, nullptr, recv.data(), 8, priocclFloat64,
                                priocclSum, 1)),
            "broadcast: sendbuf is null with count 8 on the root");
  EXPECT_EQ(
      refuse(collectiveOp(Kind::kReduce, send.data(), nullptr, 8, priocclFloat64, priocclSum, 1)),
      "reduce: recvbuf is null with count 8 on the root");
  // In place on the root: one buffer.
  checkCollective(
      collectiveOp(Kind::kBroadcast, recv.data(), recv.data(), 8, priocclFloat64, priocclSum, 1), 1,
      kSize);
}

TEST(CollectiveRules, RootsOutsideTheCommunicatorAreRefused) {
  std::vector<int> buf(4);
  for (int root : {-1, kSize, 1000})
    for (Kind k : {Kind::kBroadcast, Kind::kReduce})
      EXPECT_EQ(refuse(collectiveOp(k, buf.data(), buf.data(), 4, priocclInt32, priocclSum, root)),
                std::string(kindName(k)) + ": root " + std::to_string(root) +
                    " is not a rank of this communicator (4 ranks)");
}

TEST(CollectiveRules, NullBuffersWithACountAreRefused) {
  std::vector<float> buf(16);
  EXPECT_EQ(refuse(collectiveOp(Kind::kAllReduce, buf.data(), nullptr, 3, priocclFloat32,
                                priocclSum, -1)),
            "recvbuf is null with count 3");
  EXPECT_EQ(refuse(collectiveOp(Kind::kAllReduce, nullptr, buf.data(), 3, priocclFloat32,
                                priocclSum, -1)),
            "sendbuf is null with count 3");
  EXPECT_EQ(refuse(collectiveOp(Kind::kAllGather, nullptr, buf.data(), 3, priocclFloat32,
                                priocclSum, -1)),
            "allgather: sendbuf is null with count 3");
  EXPECT_EQ(
      refuse(collectiveOp(Kind::kAllToAll, buf.data(), nullptr, 3, priocclFloat32, priocclSum, -1)),
      "alltoall: recvbuf is null with count 3");
}

TEST(CollectiveRules, CountsBeyondTheAddressSpaceAreRefused) {
  std::vector<float> buf(4);
  EXPECT_EQ(refuse(collectiveOp(Kind::kAllReduce, buf.data(), buf.data(), SIZE_MAX / 2,
                                priocclFloat32, priocclSum, -1)),
            "count " + std::to_string(SIZE_MAX / 2) + " of float32 overflows the address space");
  EXPECT_NE(refuse(collectiveOp(Kind::kAllGather, buf.data(), buf.data(), SIZE_MAX / 2, priocclInt8,
                                priocclSum, -1))
                .find("per rank (4 ranks) overflows the address space"),
            std::string::npos);
}

TEST(CollectiveRules, InPlaceFormsAndOverlaps) {
  std::vector<int64_t> buf(64);
  int64_t* b = buf.data();
  const int rank = 2;
  // In place: the same pointer; an all-gather's send at this rank's block of recv; a
  // reduce-scatter's recv at this rank's block of send.
  checkCollective(collectiveOp(Kind::kAllReduce, b, b, 8, priocclInt64, priocclSum, -1), rank,
                  kSize);
  checkCollective(collectiveOp(Kind::kAllGather, b + 8 * rank, b, 8, priocclInt64, priocclSum, -1),
                  rank, kSize);
  checkCollective(
      collectiveOp(Kind::kReduceScatter, b, b + 8 * rank, 8, priocclInt64, priocclSum, -1), rank,
      kSize);
  // Overlaps that are none of those.
  EXPECT_EQ(refuse(collectiveOp(Kind::kAllReduce, b + 1, b, 8, priocclInt64, priocclSum, -1), rank),
            "sendbuf and recvbuf overlap without being in place (the same pointer)");
  EXPECT_EQ(refuse(collectiveOp(Kind::kAllGather, b + 8, b, 8, priocclInt64, priocclSum, -1), rank),
            "allgather: sendbuf and recvbuf overlap without being in place (sendbuf at this "
            "rank's block of recvbuf)");
  EXPECT_EQ(
      refuse(collectiveOp(Kind::kReduceScatter, b, b + 8, 8, priocclInt64, priocclSum, -1), rank),
      "reducescatter: sendbuf and recvbuf overlap without being in place (recvbuf at this "
      "rank's block of sendbuf)");
  EXPECT_EQ(refuse(collectiveOp(Kind::kAllToAll, b, b, 8, priocclInt64, priocclSum, -1), rank),
            "alltoall: sendbuf and recvbuf overlap without being in place (an all-to-all is "
            "never in place)");
  // Disjoint buffers side by side are fine.
  checkCollective(collectiveOp(Kind::kAllToAll, b, b + 32, 8, priocclInt64, priocclSum, -1), rank,
                  kSize);
}

TEST(CollectiveRules, EnumsOutsideTheirDeclaredValuesAreRefused) {
  validateEnums(priocclBfloat16, priocclAvg);
  EXPECT_EQ(refusal([] { validateEnums(static_cast<priocclDataType_t>(99), priocclSum); }),
            "invalid datatype 99");
  EXPECT_EQ(refusal([] { validateEnums(priocclFloat32, static_cast<priocclRedOp_t>(-1)); }),
            "invalid reduction op -1");
}

TEST(CollectiveVRules, PackedLayoutsAndExtents) {
  std::vector<float> send(32), recv(32);
  const size_t counts[kSize] = {1, 2, 3, 4};
  CollectiveVLayout g =
      checkCollectiveV(collectiveVOp(Kind::kAllGatherV, send.data(), recv.data(), nullptr, nullptr,
                                     counts, nullptr, priocclFloat32),
                       2, kSize);
  EXPECT_EQ(g.recvCounts, (std::vector<size_t>{1, 2, 3, 4}));
  EXPECT_EQ(g.recvDispls, (std::vector<size_t>{0, 1, 3, 6}));
  EXPECT_TRUE(g.sendCounts.empty());
  EXPECT_EQ(g.recvElems, 10u);
  EXPECT_EQ(g.sendElems, 3u);
  EXPECT_EQ(g.largest, 4u);

  CollectiveVLayout rs =
      checkCollectiveV(collectiveVOp(Kind::kReduceScatterV, send.data(), recv.data(), nullptr,
                                     nullptr, counts, nullptr, priocclFloat32),
                       3, kSize);
  EXPECT_EQ(rs.sendCounts, (std::vector<size_t>{1, 2, 3, 4}));
  EXPECT_EQ(rs.sendDispls, (std::vector<size_t>{0, 1, 3, 6}));
  EXPECT_TRUE(rs.recvCounts.empty());
  EXPECT_EQ(rs.sendElems, 10u);
  EXPECT_EQ(rs.recvElems, 4u);

  const size_t sc[kSize] = {2, 0, 1, 5}, rc[kSize] = {3, 0, 4, 1}, rd[kSize] = {20, 0, 10, 0};
  CollectiveVLayout a = checkCollectiveV(collectiveVOp(Kind::kAllToAllV, send.data(), recv.data(),
                                                       sc, nullptr, rc, rd, priocclFloat32),
                                         1, kSize);
  EXPECT_EQ(a.sendDispls, (std::vector<size_t>{0, 2, 2, 3}));
  EXPECT_EQ(a.recvDispls, (std::vector<size_t>{20, 0, 10, 0}));
  EXPECT_EQ(a.sendElems, 8u);
  EXPECT_EQ(a.recvElems, 23u);  // the extent: displacement 20 + 3
  EXPECT_EQ(a.largest, 5u);
}

TEST(CollectiveVRules, BadLayoutsAreRefused) {
  std::vector<float> send(64), recv(64);
  const size_t counts[kSize] = {1, 2, 3, 4};
  EXPECT_EQ(refuseV(collectiveVOp(Kind::kAllGatherV, send.data(), recv.data(), nullptr, nullptr,
                                  nullptr, nullptr, priocclFloat32)),
            "allgatherv: recvcounts is null");
  EXPECT_EQ(refuseV(collectiveVOp(Kind::kAllToAllV, send.data(), recv.data(), nullptr, nullptr,
                                  counts, nullptr, priocclFloat32)),
            "alltoallv: sendcounts is null");
  const size_t overlapping[kSize] = {0, 2, 4, 6};  // block 1 (2 elements at 2) runs into block 2
  const size_t wide[kSize] = {2, 3, 2, 2};
  EXPECT_EQ(refuseV(collectiveVOp(Kind::kAllGatherV, send.data(), recv.data(), nullptr, nullptr,
                                  wide, overlapping, priocclFloat32)),
            "allgatherv: blocks 1 and 2 of recvbuf overlap (each rank's block must have a place "
            "of its own)");
  const size_t huge[kSize] = {1, SIZE_MAX / 2, 1, 1};
  EXPECT_NE(refuseV(collectiveVOp(Kind::kReduceScatterV, send.data(), recv.data(), nullptr, nullptr,
                                  huge, nullptr, priocclFloat32))
                .find("reducescatterv: recvcounts[1] = " + std::to_string(SIZE_MAX / 2) +
                      " from packed displacement 1 of float32 overflows the address space"),
            std::string::npos);
  const size_t sc[kSize] = {1, 2, 1, 1}, rc[kSize] = {1, 3, 1, 1};
  EXPECT_EQ(refuseV(collectiveVOp(Kind::kAllToAllV, send.data(), recv.data(), sc, nullptr, rc,
                                  nullptr, priocclFloat32)),
            "alltoallv: sendcounts[1] = 2 but recvcounts[1] = 3: what this rank sends itself "
            "must be what it expects from itself");
  EXPECT_EQ(refuseV(collectiveVOp(Kind::kAllGatherV, nullptr, recv.data(), nullptr, nullptr, counts,
                                  nullptr, priocclFloat32)),
            "allgatherv: sendbuf is null with 2 elements to send");
  EXPECT_EQ(refuseV(collectiveVOp(Kind::kReduceScatterV, send.data(), nullptr, nullptr, nullptr,
                                  counts, nullptr, priocclFloat32)),
            "reducescatterv: recvbuf is null with 2 elements to receive");
}

TEST(CollectiveVRules, InPlaceFormsAndOverlaps) {
  std::vector<float> buf(64);
  float* b = buf.data();
  const size_t counts[kSize] = {1, 2, 3, 4};  // packed displacements 0, 1, 3, 6
  // In place: an all-gather-v's send at displs[rank] of recv, a reduce-scatter-v's recv at this
  // rank's block of send.
  checkCollectiveV(
      collectiveVOp(Kind::kAllGatherV, b + 3, b, nullptr, nullptr, counts, nullptr, priocclFloat32),
      2, kSize);
  checkCollectiveV(collectiveVOp(Kind::kReduceScatterV, b, b + 3, nullptr, nullptr, counts, nullptr,
                                 priocclFloat32),
                   2, kSize);
  EXPECT_EQ(refuseV(collectiveVOp(Kind::kAllGatherV, b + 2, b, nullptr, nullptr, counts, nullptr,
                                  priocclFloat32),
                    2),
            "allgatherv: sendbuf and recvbuf overlap without being in place (sendbuf at "
            "displs[rank] of recvbuf)");
  EXPECT_EQ(refuseV(collectiveVOp(Kind::kAllToAllV, b, b, counts, nullptr, counts, nullptr,
                                  priocclFloat32),
                    2),
            "alltoallv: sendbuf and recvbuf overlap without being in place (an all-to-all is "
            "never in place)");
}

TEST(CollectiveRules, OverflowBoundsOfEveryElementSize) {
  std::vector<double> buf(4);
  for (priocclDataType_t t :
       {priocclFloat16, priocclBfloat16, priocclFloat32, priocclInt64, priocclFloat64}) {
    const size_t elem = t == priocclFloat16 || t == priocclBfloat16 ? 2
                        : t == priocclFloat32                       ? 4
                                                                    : 8;
    // The first count past the bound, and the largest. (1-byte elements have no such bound:
    // SIZE_MAX of them is SIZE_MAX bytes.)
    const std::vector<size_t> counts{SIZE_MAX / elem + 1, SIZE_MAX};
    for (size_t count : counts) {
      EXPECT_NE(refuse(collectiveOp(Kind::kAllReduce, buf.data(), buf.data(), count, t))
                    .find("overflows the address space"),
                std::string::npos)
          << count << " elements of " << elem << " bytes";
    }
  }
}

TEST(CollectiveRules, BothOverlapsAreRefused) {
  std::vector<float> buf(16);
  float* b = buf.data();
  EXPECT_NE(refuse(collectiveOp(Kind::kAllReduce, b, b + 1, 4, priocclFloat32)).find("overlap"),
            std::string::npos);
  EXPECT_NE(refuse(collectiveOp(Kind::kAllReduce, b + 1, b, 4, priocclFloat32)).find("overlap"),
            std::string::npos);
  EXPECT_NE(refuse(collectiveOp(Kind::kAllReduce, nullptr, nullptr, 4, priocclFloat32)).find("buf"),
            std::string::npos);
}

TEST(CollectiveRules, EveryBadEnumBoundIsRefused) {
  for (int bad : {static_cast<int>(priocclNumTypes), -1, INT_MIN, INT_MAX, 42})
    EXPECT_EQ(refusal([&] {
                priocclDataType_t t;
                std::memcpy(&t, &bad, sizeof t);
                validateEnums(t, priocclSum);
              }),
              "invalid datatype " + std::to_string(bad));
  for (int bad : {static_cast<int>(priocclNumOps), -1, INT_MIN, 9})
    EXPECT_EQ(refusal([&] {
                priocclRedOp_t o;
                std::memcpy(&o, &bad, sizeof o);
                validateEnums(priocclFloat32, o);
              }),
              "invalid reduction op " + std::to_string(bad));
}

TEST(CollectiveRules, RootsFarOutsideAreRefused) {
  std::vector<float> buf(4);
  for (int root : {INT_MIN, -1, kSize, INT_MAX})
    for (Kind k : {Kind::kBroadcast, Kind::kReduce})
      EXPECT_NE(refuse(collectiveOp(k, buf.data(), buf.data(), 4, priocclFloat32, priocclSum, root))
                    .find("root " + std::to_string(root) + " is not a rank"),
                std::string::npos);
}

TEST(OpDescriptors, CarryEnumsOutsideTheirValuesToValidateEnumsUnloaded) {
  // As the C ABI passes them: any bits. The descriptor copies them as bytes; validateEnums reads
  // them the same way and refuses (under UBSan a load as an enum would fail the test).
  int32_t badType = 99, badOp = -1;
  priocclDataType_t dtype;
  priocclRedOp_t op;
  std::memcpy(&dtype, &badType, sizeof dtype);
  std::memcpy(&op, &badOp, sizeof op);
  float x = 0;
  OpDesc d = collectiveOp(Kind::kAllReduce, &x, &x, 1, dtype, priocclSum, -1, 3);
  EXPECT_EQ(refusal([&] { validateEnums(d.dtype, d.op); }), "invalid datatype 99");
  d = collectiveOp(Kind::kAllReduce, &x, &x, 1, priocclFloat32, op);
  EXPECT_EQ(refusal([&] { validateEnums(d.dtype, d.op); }), "invalid reduction op -1");
  d = named(collectiveOp(Kind::kBroadcast, &x, &x, 1, priocclFloat32, priocclSum, 2, 7), "w");
  EXPECT_TRUE(d.named);
  EXPECT_EQ(d.key, "w");
  EXPECT_EQ(d.root, 2);
  EXPECT_EQ(d.priority, 7);
}

TEST(OpDescriptors, EveryKindHasItsFamily) {
  EXPECT_EQ(familyOf(Kind::kAllReduce), OpFamily::kCollective);
  EXPECT_EQ(familyOf(Kind::kBarrier), OpFamily::kCollective);
  EXPECT_EQ(familyOf(Kind::kJoin), OpFamily::kCollective);
  EXPECT_EQ(familyOf(Kind::kAllGatherV), OpFamily::kCollectiveV);
  EXPECT_EQ(familyOf(Kind::kReduceScatterV), OpFamily::kCollectiveV);
  EXPECT_EQ(familyOf(Kind::kAllToAllV), OpFamily::kCollectiveV);
  EXPECT_EQ(familyOf(Kind::kSend), OpFamily::kPointToPoint);
  EXPECT_EQ(familyOf(Kind::kRecv), OpFamily::kPointToPoint);
}

TEST(PointToPointRules, PeersCountsAndBuffers) {
  std::vector<double> buf(4);
  auto refuseP2P = [](const OpDesc& d) { return refusal([&] { checkPointToPoint(d, 1, kSize); }); };
  EXPECT_EQ(refuseP2P(pointToPointOp(Kind::kSend, buf.data(), 4, priocclFloat64, 0, 0, 0)), "");
  EXPECT_EQ(refuseP2P(pointToPointOp(Kind::kRecv, nullptr, 0, priocclFloat64, 3, 0, 0)), "");
  EXPECT_EQ(refuseP2P(pointToPointOp(Kind::kSend, buf.data(), 4, priocclFloat64, 1, 0, 0)),
            "send: peer 1 is not another rank (this is rank 1 of 4)");
  EXPECT_EQ(refuseP2P(pointToPointOp(Kind::kRecv, buf.data(), 4, priocclFloat64, 4, 0, 0)),
            "recv: peer 4 is not another rank (this is rank 1 of 4)");
  EXPECT_EQ(refuseP2P(pointToPointOp(Kind::kRecv, buf.data(), 4, priocclFloat64, -1, 0, 0)),
            "recv: peer -1 is not another rank (this is rank 1 of 4)");
  EXPECT_EQ(refuseP2P(pointToPointOp(Kind::kSend, nullptr, 4, priocclFloat64, 0, 0, 0)),
            "send: buf is null with count 4");
  EXPECT_EQ(
      refuseP2P(pointToPointOp(Kind::kRecv, buf.data(), SIZE_MAX / 4, priocclFloat64, 0, 0, 0)),
      "recv: count " + std::to_string(SIZE_MAX / 4) + " overflows the address space");
}

// The ragged collectives' rules (api/ragged.h): this rank's records from its arguments, and the
// counts (or the error every rank raises alike) from every rank's records.
TEST(RaggedRules, OwnRecords) {
  std::vector<float> buf(12);
  OwnRows g = ownRows("ag", rowsOp(Kind::kAllGatherV, buf.data(), 3, nullptr, 4, priocclFloat32, 0),
                      kSize, 77);
  ASSERT_EQ(g.records.size(), 1u);
  EXPECT_EQ(g.records[0].rows, 3u);
  EXPECT_EQ(g.records[0].rowCount, 4u);
  EXPECT_EQ(g.records[0].dtype, static_cast<uint64_t>(priocclFloat32));
  EXPECT_EQ(g.records[0].shape, 77u);
  EXPECT_FALSE(g.failed);
  const size_t sendRows[kSize] = {1, 0, 2, 0};
  OwnRows a = ownRows(
      "a2a", rowsOp(Kind::kAllToAllV, buf.data(), 0, sendRows, 4, priocclFloat32, 0), kSize, 0);
  ASSERT_EQ(a.records.size(), 4u);
  EXPECT_EQ(a.records[2].rows, 2u);
  EXPECT_EQ(a.sendCounts, (std::vector<size_t>{4, 0, 8, 0}));
  // No rows, no buffer needed; a failed rank's records say only that.
  EXPECT_NO_THROW(ownRows(
      "ag", rowsOp(Kind::kAllGatherV, nullptr, 0, nullptr, 4, priocclFloat32, 0), kSize, 0));
  OwnRows f =
      ownRows("ag", rowsOp(Kind::kAllGatherV, nullptr, kRowsFailed, nullptr, 99, priocclFloat32, 0),
              kSize, 5);
  EXPECT_TRUE(f.failed);
  EXPECT_EQ(f.records[0].rows, kRowsFailed);
  EXPECT_EQ(f.records[0].rowCount, 0u);
  EXPECT_EQ(kRowsFailed, static_cast<uint64_t>(PRIOCCL_ROWS_FAILED));
}

TEST(RaggedRules, OwnRecordsRefusals) {
  std::vector<float> buf(4);
  auto refuseOwn = [](const OpDesc& d) { return refusal([&] { ownRows("w", d, kSize, 0); }); };
  EXPECT_EQ(refuseOwn(rowsOp(Kind::kAllGatherV, nullptr, 2, nullptr, 2, priocclFloat32, 0)),
            "w: sendbuff is null with 2 rows of 2 elements");
  EXPECT_EQ(refuseOwn(rowsOp(Kind::kAllToAllV, buf.data(), 0, nullptr, 2, priocclFloat32, 0)),
            "w: sendRows is null");
  const size_t mixed[kSize] = {kRowsFailed, 1, kRowsFailed, kRowsFailed};
  EXPECT_NE(refuseOwn(rowsOp(Kind::kAllToAllV, buf.data(), 0, mixed, 2, priocclFloat32, 0))
                .find("PRIOCCL_ROWS_FAILED goes in every entry or none"),
            std::string::npos);
  EXPECT_NE(
      refuseOwn(rowsOp(Kind::kAllGatherV, buf.data(), SIZE_MAX / 8, nullptr, 4, priocclFloat32, 0))
          .find("overflow the address space"),
      std::string::npos);
  EXPECT_NE(
      refuseOwn(rowsOp(Kind::kAllGatherV, buf.data(), 1, nullptr, SIZE_MAX / 2, priocclFloat32, 0))
          .find("rowCount"),
      std::string::npos);
}

TEST(RaggedRules, CountsOrTheSameErrorOnEveryRank) {
  auto record = [](uint64_t rows, uint64_t rowCount = 3, priocclDataType_t dt = priocclFloat64,
                   uint64_t shape = 9) {
    RowRecord r;
    r.rows = rows;
    r.rowCount = rowCount;
    r.dtype = static_cast<uint64_t>(dt);
    r.shape = shape;
    return r;
  };
  EXPECT_EQ(rowCounts("ag", {record(2), record(0), record(5), record(1)}),
            (std::vector<size_t>{6, 0, 15, 3}));
  auto refuseCounts = [](const std::vector<RowRecord>& r) {
    return refusal([&] { rowCounts("ag", r); });
  };
  RowRecord failed;
  failed.rows = kRowsFailed;
  EXPECT_EQ(refuseCounts({record(1), failed, record(1), failed}),
            "ag: rank(s) [1, 3] failed before the op (their error says why)");
  EXPECT_EQ(refuseCounts({record(1), record(1, 3, priocclInt32), record(1), record(1)}),
            "ag: ranks differ in dtype (by rank: [float64, int32, float64, float64])");
  EXPECT_EQ(refuseCounts({record(1), record(1), record(1, 4), record(1)}),
            "ag: ranks differ in the dimensions after the first (elements per row by rank: "
            "[3, 3, 4, 3]); only the first dimension may differ");
  EXPECT_NE(refuseCounts({record(1), record(1, 3, priocclFloat64, 8), record(1), record(1)})
                .find("dimensions after the first"),
            std::string::npos);
  // Each rank's rows fit; their sum does not.
  EXPECT_NE(refuseCounts({record(SIZE_MAX / 8 / 3), record(SIZE_MAX / 8 / 3), record(1), record(1)})
                .find("overflow the address space"),
            std::string::npos);
}

}  // namespace
}  // namespace prioccl::detail
