// Multi-rank correctness of the collectives beside all-reduce (broadcast so far): every dtype x
// root x size x placement against MPI's own collective on the same bytes, bitwise; named ops
// submitted in different orders on different ranks; collectives mixed with all-reduces of other
// priorities, each as the urgent and as the bulk op.
//
// Inputs are arbitrary bytes (a hash of rank, case and index): NaNs with payloads, -0.0 and
// subnormals included, so any arithmetic on the data (a broadcast done as an all-reduce of zeros
// turns -0.0 into +0.0) shows as a wrong bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mpi_test_util.h"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::Communicator;
using prioccl::Request;
using prioccl::test::kSanitizerShrink;
using prioccl::test::worldRank;
using prioccl::test::worldSize;

const priocclDataType_t kDtypes[] = {priocclInt8,    priocclUint8,  priocclInt32,   priocclUint32,
                                     priocclInt64,   priocclUint64, priocclFloat16, priocclBfloat16,
                                     priocclFloat32, priocclFloat64};

size_t sizeOf(priocclDataType_t dt) {
  switch (dt) {
    case priocclInt8:
    case priocclUint8:
      return 1;
    case priocclFloat16:
    case priocclBfloat16:
      return 2;
    case priocclInt32:
    case priocclUint32:
    case priocclFloat32:
      return 4;
    default:
      return 8;
  }
}

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::vector<unsigned char> bytesOf(uint64_t seed, size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t h = mix(seed * 0x100000001b3ULL + i);
    std::memcpy(v.data() + i, &h, std::min<size_t>(8, n - i));
  }
  return v;
}

// The root's bytes as MPI_Bcast delivers them: the reference every rank compares with.
std::vector<unsigned char> mpiBroadcast(std::vector<unsigned char> bytes, int root) {
  MPI_Bcast(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, root, MPI_COMM_WORLD);
  return bytes;
}

// Index of the first differing byte, or -1.
long firstDifference(const std::vector<unsigned char>& a, const unsigned char* b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<long>(i);
  return -1;
}

class Collectives : public testing::Test {
 protected:
  void SetUp() override {
    rank_ = worldRank();
    size_ = worldSize();
    comm_ = Communicator::world();
  }
  void TearDown() override { comm_.destroy(); }

  Communicator comm_;
  int rank_ = 0, size_ = 1;
};

// Every dtype, root, size (one element to several chunks) and placement: every rank ends with
// the root's bytes, bitwise as MPI_Bcast gives them; the root's send buffer is untouched; what
// a non-root rank passes as its send buffer is never read.
TEST_F(Collectives, BroadcastMatchesMpiBcast) {
  const size_t counts[] = {1, 13, 4099, 300000 / kSanitizerShrink};
  uint64_t seed = 1;
  for (priocclDataType_t dt : kDtypes) {
    for (int root = 0; root < size_; ++root) {
      for (size_t count : counts) {
        for (bool inPlace : {false, true}) {
          ++seed;
          const size_t bytes = count * sizeOf(dt);
          std::string label = "dtype " + std::to_string(dt) + " root " + std::to_string(root) +
                              " count " + std::to_string(count) + (inPlace ? " in place" : "");
          std::vector<unsigned char> mine = bytesOf(seed * 64 + rank_, bytes);
          std::vector<unsigned char> want = mpiBroadcast(mine, root);
          std::vector<unsigned char> send = mine, recv(bytes, 0xCD);
          if (inPlace) recv = mine;
          // Non-root ranks pass their own (ignored) data, or no send buffer at all.
          const void* sendbuf = inPlace ? recv.data() : send.data();
          if (rank_ != root && !inPlace && seed % 2) sendbuf = nullptr;
          comm_.broadcast(sendbuf, recv.data(), count, dt, root);
          EXPECT_EQ(firstDifference(want, recv.data()), -1) << label;
          if (rank_ == root && !inPlace) {
            EXPECT_EQ(firstDifference(mine, send.data()), -1) << label << ": send buffer written";
          }
        }
      }
    }
  }
}

// Count 0 succeeds at once with no buffers, as for all-reduce.
TEST_F(Collectives, BroadcastOfNothing) {
  comm_.broadcast(nullptr, nullptr, 0, priocclFloat32, size_ - 1);
  comm_.broadcastAsync(nullptr, nullptr, 0, priocclFloat32, 0, 0, "empty").wait();
}

// Named broadcasts match by key, whatever order each rank submits them in; unnamed ones by order.
TEST_F(Collectives, NamedBroadcastsInAnyOrder) {
  constexpr int kOps = 5;
  std::vector<std::vector<unsigned char>> mine(kOps), recv(kOps);
  std::vector<Request> reqs(kOps);
  for (int k = 0; k < kOps; ++k) {
    size_t bytes = 4 * (1000 + 37000 * static_cast<size_t>(k));
    mine[k] = bytesOf(9000 + k * 64 + rank_, bytes);
    recv[k].assign(bytes, 0);
  }
  for (int i = 0; i < kOps; ++i) {
    int k = (i + rank_) % kOps;  // every rank starts elsewhere
    int root = k % size_;
    reqs[k] = comm_.broadcastAsync(mine[k].data(), recv[k].data(), recv[k].size() / 4,
                                   priocclFloat32, root, k, "bcast." + std::to_string(k));
  }
  for (int k = 0; k < kOps; ++k) {
    reqs[k].wait();
    EXPECT_EQ(firstDifference(mpiBroadcast(mine[k], k % size_), recv[k].data()), -1) << "op " << k;
  }
}

// A bulk op and an urgent op of the other kind, submitted bulk first, both async and unnamed:
// both right on every rank, whichever kind is the urgent one.
TEST_F(Collectives, BroadcastAndAllReduceAtMixedPriorities) {
  const size_t bulk = (size_t{4} << 20) / kSanitizerShrink / 4, urgent = 16384;  // floats
  const int root = size_ - 1;
  for (bool broadcastUrgent : {true, false}) {
    std::string label = broadcastUrgent ? "urgent broadcast" : "urgent all-reduce";
    size_t bcastCount = broadcastUrgent ? urgent : bulk;
    size_t reduceCount = broadcastUrgent ? bulk : urgent;
    std::vector<unsigned char> data = bytesOf(777 + rank_, bcastCount * 4);
    std::vector<unsigned char> got(data.size(), 0);
    std::vector<int32_t> ones(reduceCount, rank_ + 1), sum(reduceCount, 0);
    Request first, second;
    if (broadcastUrgent) {
      first =
          comm_.allReduceAsync(ones.data(), sum.data(), reduceCount, priocclInt32, priocclSum, 10);
      second = comm_.broadcastAsync(data.data(), got.data(), bcastCount, priocclFloat32, root, -5);
    } else {
      first = comm_.broadcastAsync(data.data(), got.data(), bcastCount, priocclFloat32, root, 10);
      second =
          comm_.allReduceAsync(ones.data(), sum.data(), reduceCount, priocclInt32, priocclSum, -5);
    }
    second.wait();
    first.wait();
    EXPECT_EQ(firstDifference(mpiBroadcast(data, root), got.data()), -1) << label;
    const int32_t want = size_ * (size_ + 1) / 2;
    EXPECT_EQ(std::count(sum.begin(), sum.end(), want), static_cast<long>(reduceCount)) << label;
  }
}

}  // namespace
