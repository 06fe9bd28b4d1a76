// Multi-rank correctness of the collectives beside all-reduce (broadcast, reduce, all-gather,
// reduce-scatter, all-to-all, their v-variants, barrier): every dtype x
// (op x) root x size x placement against MPI's own collective on the same bytes, bitwise; named ops
// submitted in different orders on different ranks; collectives mixed with all-reduces of other
// priorities, each as the urgent and as the bulk op.
//
// Inputs are arbitrary bytes (a hash of rank, case and index): NaNs with payloads, -0.0 and
// subnormals included, so any arithmetic on the data (a broadcast done as an all-reduce of zeros
// turns -0.0 into +0.0) shows as a wrong bit.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "mpi_test_util.h"
#include "prioccl/prioccl.h"
#include "prioccl/prioccl.hpp"
#include "reduce/half.h"

namespace {

using prioccl::Communicator;
using prioccl::Request;
using prioccl::test::bytesOf;
using prioccl::test::inPlaceHalf;
using prioccl::test::kDtypes;
using prioccl::test::kNumDtypes;
using prioccl::test::kOps;
using prioccl::test::kSanitizerShrink;
using prioccl::test::sizeOf;
using prioccl::test::worldRank;
using prioccl::test::worldSize;

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

// Small positive integers in `dt` (1..3; 1..2 for Prod): exact in every type, so any order of
// reduction gives the same bits, and MPI's reduction can be compared bitwise.
std::vector<unsigned char> smallValues(priocclDataType_t dt, priocclRedOp_t op, int rank,
                                       size_t count) {
  std::vector<unsigned char> v(count * sizeOf(dt));
  for (size_t i = 0; i < count; ++i) {
    int x = static_cast<int>((static_cast<size_t>(rank) * 7 + i) % (op == priocclProd ? 2 : 3)) + 1;
    unsigned char* p = v.data() + i * sizeOf(dt);
    switch (dt) {
      case priocclFloat16: {
        uint16_t h = prioccl::reduce::floatToHalf(static_cast<float>(x));
        std::memcpy(p, &h, 2);
        break;
      }
      case priocclBfloat16: {
        uint16_t b = prioccl::reduce::floatToBf16(static_cast<float>(x));
        std::memcpy(p, &b, 2);
        break;
      }
      case priocclFloat32: {
        float f = static_cast<float>(x);
        std::memcpy(p, &f, 4);
        break;
      }
      case priocclFloat64: {
        double d = x;
        std::memcpy(p, &d, 8);
        break;
      }
      default:  // integers, little-endian
        std::memset(p, 0, sizeOf(dt));
        p[0] = static_cast<unsigned char>(x);
    }
  }
  return v;
}

MPI_Datatype mpiType(priocclDataType_t dt) {
  switch (dt) {
    case priocclInt8:
      return MPI_INT8_T;
    case priocclUint8:
      return MPI_UINT8_T;
    case priocclInt32:
      return MPI_INT32_T;
    case priocclUint32:
      return MPI_UINT32_T;
    case priocclInt64:
      return MPI_INT64_T;
    case priocclUint64:
      return MPI_UINT64_T;
    case priocclFloat32:
      return MPI_FLOAT;
    case priocclFloat64:
      return MPI_DOUBLE;
    default:
      return MPI_DATATYPE_NULL;  // 16-bit floats: MPI has none
  }
}

MPI_Op mpiOp(priocclRedOp_t op) {
  switch (op) {
    case priocclSum:
      return MPI_SUM;
    case priocclProd:
      return MPI_PROD;
    case priocclMin:
      return MPI_MIN;
    case priocclMax:
      return MPI_MAX;
    default:
      return MPI_OP_NULL;  // Avg: MPI has none
  }
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

// Every dtype x op x root x size, half of them in place (inPlaceHalf): the root's receive buffer
// holds MPI_Reduce's result bitwise (where MPI has the type and op), else the all-reduce's (Avg,
// 16-bit floats; the all-reduce is checked against an independent reference in test_allreduce); the
// inputs are exact, so every order of reduction gives these bits. Non-root ranks' receive buffers
// (null, or a buffer the root alone may write) and every send buffer stay untouched.
TEST_F(Collectives, ReduceMatchesMpiReduce) {
  const size_t counts[] = {1, 4099, 300000 / kSanitizerShrink};
  for (size_t d = 0; d < kNumDtypes; ++d) {
    const priocclDataType_t dt = kDtypes[d];
    for (size_t o = 0; o < std::size(kOps); ++o) {
      const priocclRedOp_t op = kOps[o];
      for (int root = 0; root < size_; ++root) {
        for (size_t k = 0; k < std::size(counts); ++k) {
          const size_t count = counts[k];
          const bool inPlace = inPlaceHalf({d, o, static_cast<size_t>(root), k});
          const size_t bytes = count * sizeOf(dt);
          std::string label = "dtype " + std::to_string(dt) + " op " + std::to_string(op) +
                              " root " + std::to_string(root) + " count " + std::to_string(count) +
                              (inPlace ? " in place" : "");
          std::vector<unsigned char> mine = smallValues(dt, op, rank_, count);
          std::vector<unsigned char> want(bytes, 0);
          if (mpiType(dt) != MPI_DATATYPE_NULL && mpiOp(op) != MPI_OP_NULL) {
            MPI_Reduce(mine.data(), want.data(), static_cast<int>(count), mpiType(dt), mpiOp(op),
                       root, MPI_COMM_WORLD);
          } else {
            comm_.allReduce(mine.data(), want.data(), count, dt, op);
          }
          std::vector<unsigned char> send = mine, recv(bytes, 0xCD);
          if (inPlace) recv = mine;
          void* recvbuf = recv.data();
          if (rank_ != root && count > 1000) recvbuf = nullptr;  // never written there
          comm_.reduce(inPlace ? recv.data() : send.data(), recvbuf, count, dt, op, root);
          if (rank_ == root) {
            EXPECT_EQ(firstDifference(want, recv.data()), -1) << label;
          } else if (!inPlace) {
            EXPECT_EQ(std::count(recv.begin(), recv.end(), 0xCD), static_cast<long>(bytes))
                << label << ": a non-root rank's receive buffer was written";
          }
          if (!inPlace) {
            EXPECT_EQ(firstDifference(mine, send.data()), -1) << label << ": send buffer written";
          } else if (rank_ != root) {
            EXPECT_EQ(firstDifference(mine, recv.data()), -1)
                << label << ": in-place input written";
          }
        }
      }
    }
  }
}

// Every dtype, size and placement: every rank's receive buffer holds MPI_Allgather's result of the
// same bytes, bitwise; send buffers untouched.
TEST_F(Collectives, AllGatherMatchesMpiAllgather) {
  const size_t counts[] = {1, 13, 4099, 100000 / kSanitizerShrink};
  uint64_t seed = 500;
  for (priocclDataType_t dt : kDtypes) {
    for (size_t count : counts) {
      for (bool inPlace : {false, true}) {
        ++seed;
        const size_t bytes = count * sizeOf(dt), all = bytes * static_cast<size_t>(size_);
        std::string label = "dtype " + std::to_string(dt) + " count " + std::to_string(count) +
                            (inPlace ? " in place" : "");
        std::vector<unsigned char> mine = bytesOf(seed * 64 + rank_, bytes), want(all);
        MPI_Allgather(mine.data(), static_cast<int>(bytes), MPI_BYTE, want.data(),
                      static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD);
        std::vector<unsigned char> send = mine, recv(all, 0xCD);
        unsigned char* own = recv.data() + static_cast<size_t>(rank_) * bytes;
        if (inPlace) std::memcpy(own, mine.data(), bytes);
        comm_.allGather(inPlace ? own : send.data(), recv.data(), count, dt);
        EXPECT_EQ(firstDifference(want, recv.data()), -1) << label;
        if (!inPlace) {
          EXPECT_EQ(firstDifference(mine, send.data()), -1) << label << ": send buffer written";
        }
      }
    }
  }
}

// Every dtype, op, size and placement: each rank's block holds MPI_Reduce_scatter_block's result
// bitwise (where MPI has the type and op), else its block of the all-reduce's (exact inputs).
TEST_F(Collectives, ReduceScatterMatchesMpi) {
  const size_t counts[] = {1, 4099, 100000 / kSanitizerShrink};
  for (priocclDataType_t dt : kDtypes) {
    for (priocclRedOp_t op : kOps) {
      for (size_t count : counts) {
        for (bool inPlace : {false, true}) {
          const size_t bytes = count * sizeOf(dt), all = bytes * static_cast<size_t>(size_);
          std::string label = "dtype " + std::to_string(dt) + " op " + std::to_string(op) +
                              " count " + std::to_string(count) + (inPlace ? " in place" : "");
          std::vector<unsigned char> mine = smallValues(dt, op, rank_, count * size_);
          std::vector<unsigned char> want(bytes);
          if (mpiType(dt) != MPI_DATATYPE_NULL && mpiOp(op) != MPI_OP_NULL) {
            MPI_Reduce_scatter_block(mine.data(), want.data(), static_cast<int>(count), mpiType(dt),
                                     mpiOp(op), MPI_COMM_WORLD);
          } else {
            std::vector<unsigned char> full(all);
            comm_.allReduce(mine.data(), full.data(), count * size_, dt, op);
            std::memcpy(want.data(), full.data() + static_cast<size_t>(rank_) * bytes, bytes);
          }
          std::vector<unsigned char> send = mine, recv(bytes, 0xCD);
          unsigned char* own = send.data() + static_cast<size_t>(rank_) * bytes;
          comm_.reduceScatter(send.data(), inPlace ? own : recv.data(), count, dt, op);
          EXPECT_EQ(firstDifference(want, inPlace ? own : recv.data()), -1) << label;
          if (!inPlace) {
            EXPECT_EQ(firstDifference(mine, send.data()), -1) << label << ": send buffer written";
          }
        }
      }
    }
  }
}

// Every dtype and size: every rank's receive buffer holds MPI_Alltoall's result of the same bytes.
TEST_F(Collectives, AllToAllMatchesMpiAlltoall) {
  const size_t counts[] = {1, 13, 4099, 100000 / kSanitizerShrink};
  uint64_t seed = 900;
  for (priocclDataType_t dt : kDtypes) {
    for (size_t count : counts) {
      ++seed;
      const size_t bytes = count * sizeOf(dt), all = bytes * static_cast<size_t>(size_);
      std::string label = "dtype " + std::to_string(dt) + " count " + std::to_string(count);
      std::vector<unsigned char> mine = bytesOf(seed * 64 + rank_, all), want(all);
      MPI_Alltoall(mine.data(), static_cast<int>(bytes), MPI_BYTE, want.data(),
                   static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD);
      std::vector<unsigned char> recv(all, 0xCD);
      comm_.allToAll(mine.data(), recv.data(), count, dt);
      EXPECT_EQ(firstDifference(want, recv.data()), -1) << label;
    }
  }
}

// The v-variants' layouts: per-rank counts, some 0, the largest spanning several chunks at the
// biggest scale, so that blocks end in different chunks; and displacements that leave gaps
// between the blocks, in reverse rank order (or none: packed).
std::vector<size_t> unevenCounts(int nranks, size_t scale, int salt) {
  std::vector<size_t> c(static_cast<size_t>(nranks));
  for (int b = 0; b < nranks; ++b)
    c[static_cast<size_t>(b)] =
        (b + salt) % 3 == 1
            ? 0
            : scale * static_cast<size_t>(b + salt % 2 + 1) + 3 * static_cast<size_t>(b);
  return c;
}
std::vector<size_t> gappedDispls(const std::vector<size_t>& counts, size_t* extent) {
  std::vector<size_t> d(counts.size());
  size_t at = 5;
  for (size_t b = counts.size(); b-- > 0;) {
    d[b] = at;
    at += counts[b] + 7;
  }
  *extent = at;
  return d;
}
std::vector<int> mpiInts(const std::vector<size_t>& v, size_t scale) {
  std::vector<int> out;
  for (size_t x : v) out.push_back(static_cast<int>(x * scale));
  return out;
}

// Every dtype, layout (packed or gapped) and placement: every rank's receive buffer holds
// MPI_Allgatherv's result of the same bytes, bitwise, the gaps between blocks untouched.
TEST_F(Collectives, AllGatherVMatchesMpiAllgatherv) {
  const size_t scales[] = {1, 997, 40000 / kSanitizerShrink};
  uint64_t seed = 1500;
  for (priocclDataType_t dt : kDtypes) {
    for (size_t scale : scales) {
      for (int form = 0; form < 3; ++form) {  // packed, gapped, in place (gapped)
        ++seed;
        const size_t elem = sizeOf(dt);
        std::vector<size_t> counts = unevenCounts(size_, scale, form), displs;
        size_t extent = 0;
        for (size_t c : counts) extent += c;
        if (form > 0) displs = gappedDispls(counts, &extent);
        std::string label = "dtype " + std::to_string(dt) + " scale " + std::to_string(scale) +
                            " form " + std::to_string(form);
        const size_t me = static_cast<size_t>(rank_), bytes = counts[me] * elem;
        std::vector<unsigned char> mine = bytesOf(seed * 64 + me, bytes), want(extent * elem, 0xCD);
        std::vector<int> displsBytes(counts.size());
        for (size_t b = 0, at = 0; b < counts.size(); at += counts[b++])
          displsBytes[b] = static_cast<int>((displs.empty() ? at : displs[b]) * elem);
        MPI_Allgatherv(mine.data(), static_cast<int>(bytes), MPI_BYTE, want.data(),
                       mpiInts(counts, elem).data(), displsBytes.data(), MPI_BYTE, MPI_COMM_WORLD);
        std::vector<unsigned char> send = mine, recv(extent * elem, 0xCD);
        unsigned char* own = recv.data() + static_cast<size_t>(displsBytes[me]);
        if (form == 2 && bytes) std::memcpy(own, mine.data(), bytes);  // an empty block: null
        comm_.allGatherV(form == 2 ? own : send.data(), recv.data(), counts.data(),
                         displs.empty() ? nullptr : displs.data(), dt);
        EXPECT_EQ(firstDifference(want, recv.data()), -1) << label;
        EXPECT_EQ(firstDifference(mine, send.data()), -1) << label << ": send buffer written";
      }
    }
  }
}

// Every dtype, op, scale and placement: each rank's block holds MPI_Reduce_scatter's result
// bitwise (where MPI has the type and op), else its part of the all-reduce's (exact inputs).
TEST_F(Collectives, ReduceScatterVMatchesMpi) {
  const size_t scales[] = {1, 40000 / kSanitizerShrink};
  for (priocclDataType_t dt : kDtypes) {
    for (priocclRedOp_t op : kOps) {
      for (size_t scale : scales) {
        for (bool inPlace : {false, true}) {
          const size_t elem = sizeOf(dt), me = static_cast<size_t>(rank_);
          std::vector<size_t> counts = unevenCounts(size_, scale, inPlace ? 1 : 0);
          size_t total = 0, mineAt = 0;
          for (size_t b = 0; b < counts.size(); ++b) {
            if (b == me) mineAt = total;
            total += counts[b];
          }
          std::string label = "dtype " + std::to_string(dt) + " op " + std::to_string(op) +
                              " scale " + std::to_string(scale) + (inPlace ? " in place" : "");
          std::vector<unsigned char> mine = smallValues(dt, op, rank_, total);
          std::vector<unsigned char> want(counts[me] * elem);
          if (mpiType(dt) != MPI_DATATYPE_NULL && mpiOp(op) != MPI_OP_NULL) {
            MPI_Reduce_scatter(mine.data(), want.data(), mpiInts(counts, 1).data(), mpiType(dt),
                               mpiOp(op), MPI_COMM_WORLD);
          } else {
            std::vector<unsigned char> full(total * elem);
            comm_.allReduce(mine.data(), full.data(), total, dt, op);
            if (!want.empty())  // this rank's block may be empty: data() may then be null
              std::memcpy(want.data(), full.data() + mineAt * elem, want.size());
          }
          std::vector<unsigned char> send = mine, recv(want.size(), 0xCD);
          unsigned char* own = send.data() + mineAt * elem;
          comm_.reduceScatterV(send.data(), inPlace ? own : recv.data(), counts.data(), dt, op);
          EXPECT_EQ(firstDifference(want, inPlace ? own : recv.data()), -1) << label;
          if (!inPlace) {
            EXPECT_EQ(firstDifference(mine, send.data()), -1) << label << ": send buffer written";
          }
        }
      }
    }
  }
}

// Every dtype, scale and layout: every rank's receive buffer holds MPI_Alltoallv's result of the
// same bytes, the gaps untouched. Rank i sends rank j a count that depends on both (0 for some
// pairs, its own block included).
TEST_F(Collectives, AllToAllVMatchesMpiAlltoallv) {
  const size_t scales[] = {1, 997, 30000 / kSanitizerShrink};
  auto pairCount = [](int from, int to, size_t scale) -> size_t {
    return (from + 2 * to) % 4 == 3
               ? 0
               : scale * static_cast<size_t>(1 + (from + to) % 3) + static_cast<size_t>(from);
  };
  uint64_t seed = 2500;
  for (priocclDataType_t dt : kDtypes) {
    for (size_t scale : scales) {
      for (bool gapped : {false, true}) {
        ++seed;
        const size_t elem = sizeOf(dt), p = static_cast<size_t>(size_);
        std::vector<size_t> sendCounts(p), recvCounts(p), sdispls, rdispls;
        for (int j = 0; j < size_; ++j) {
          sendCounts[static_cast<size_t>(j)] = pairCount(rank_, j, scale);
          recvCounts[static_cast<size_t>(j)] = pairCount(j, rank_, scale);
        }
        size_t sendExtent = 0, recvExtent = 0;
        for (size_t j = 0; j < p; ++j) sendExtent += sendCounts[j], recvExtent += recvCounts[j];
        if (gapped) {
          sdispls = gappedDispls(sendCounts, &sendExtent);
          rdispls = gappedDispls(recvCounts, &recvExtent);
        }
        auto bytesAt = [&](const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
          std::vector<int> out(p);
          for (size_t b = 0, at = 0; b < p; at += counts[b++])
            out[b] = static_cast<int>((displs.empty() ? at : displs[b]) * elem);
          return out;
        };
        std::string label = "dtype " + std::to_string(dt) + " scale " + std::to_string(scale) +
                            (gapped ? " gapped" : " packed");
        std::vector<unsigned char> mine =
            bytesOf(seed * 64 + static_cast<size_t>(rank_), sendExtent * elem);
        std::vector<unsigned char> want(recvExtent * elem, 0xCD), recv(want);
        MPI_Alltoallv(mine.data(), mpiInts(sendCounts, elem).data(),
                      bytesAt(sendCounts, sdispls).data(), MPI_BYTE, want.data(),
                      mpiInts(recvCounts, elem).data(), bytesAt(recvCounts, rdispls).data(),
                      MPI_BYTE, MPI_COMM_WORLD);
        comm_.allToAllV(mine.data(), sendCounts.data(), sdispls.empty() ? nullptr : sdispls.data(),
                        recv.data(), recvCounts.data(), rdispls.empty() ? nullptr : rdispls.data(),
                        dt);
        EXPECT_EQ(firstDifference(want, recv.data()), -1) << label;
      }
    }
  }
}

// The ragged collectives (each rank knows only its own rows): every dtype and several row shapes,
// some ranks with no rows, against MPI_Allgatherv / MPI_Alltoallv of the same bytes, bitwise, with
// the rows from each rank as every rank has them. An unnamed all-reduce submitted right behind
// each one (before the ragged op's rows are known) still matches its peers: the door keeps the
// submission order.
TEST_F(Collectives, RaggedAllGatherMatchesMpiAllgatherv) {
  const size_t p = static_cast<size_t>(size_), me = static_cast<size_t>(rank_);
  uint64_t seed = 3100;
  for (priocclDataType_t dt : kDtypes) {
    for (size_t rowCount : {size_t{1}, size_t{7}, 3000 / kSanitizerShrink}) {
      ++seed;
      const size_t elem = sizeOf(dt);
      std::vector<size_t> rows(p);
      for (size_t k = 0; k < p; ++k) rows[k] = (k * 5 + seed) % 4;  // 0..3, some ranks none
      std::vector<size_t> counts(p);
      for (size_t k = 0; k < p; ++k) counts[k] = rows[k] * rowCount;
      size_t total = 0;
      for (size_t c : counts) total += c;
      std::vector<unsigned char> mine = bytesOf(seed * 64 + me, counts[me] * elem);
      std::vector<unsigned char> want(total * elem);
      std::vector<int> displs(p);
      for (size_t k = 0, at = 0; k < p; at += counts[k++]) displs[k] = static_cast<int>(at * elem);
      MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, want.data(),
                     mpiInts(counts, elem).data(), displs.data(), MPI_BYTE, MPI_COMM_WORLD);
      const std::string label =
          "dtype " + std::to_string(dt) + " rowCount " + std::to_string(rowCount);
      prioccl::Rows result;
      Request r = seed % 2 ? comm_.allGatherRowsAsync(mine.data(), rows[me], rowCount, dt, &result)
                           : comm_.allGatherRowsAsync(mine.data(), rows[me], rowCount, dt, &result,
                                                      1, "ragged.gather");
      int64_t one = 1, sum = 0;
      comm_.allReduce(&one, &sum, 1, priocclInt64, priocclSum);  // behind it at the door
      EXPECT_EQ(sum, size_) << label;
      r.wait();
      ASSERT_EQ(result.bytes(), want.size()) << label;
      EXPECT_EQ(firstDifference(want, static_cast<const unsigned char*>(result.data())), -1)
          << label;
      EXPECT_EQ(result.rows(), rows) << label;
    }
  }
}

// A named ragged op matches by its name, not its place: rank 0 submits it before a barrier, the
// others after theirs (Horovod's duplicate-name tests do this). Its exchange of sizes cannot finish
// before the others pass the barrier, so it must not hold rank 0's barrier at the door.
TEST_F(Collectives, NamedRaggedOpsDoNotHoldLaterOpsAtTheDoor) {
  const size_t p = static_cast<size_t>(size_), me = static_cast<size_t>(rank_);
  for (int form = 0; form < 2; ++form) {
    std::vector<int32_t> mine(2 * p, static_cast<int32_t>(me + 1));
    std::vector<size_t> sendRows(p, 1);
    prioccl::Rows result;
    const std::string key = form ? "ragged.across.alltoall" : "ragged.across.allgather";
    auto submit = [&] {
      return form ? comm_.allToAllRowsAsync(mine.data(), sendRows.data(), 2, priocclInt32, &result,
                                            0, key)
                  : comm_.allGatherRowsAsync(mine.data(), p, 2, priocclInt32, &result, 0, key);
    };
    Request r;
    if (rank_ == 0) r = submit();
    comm_.barrier();
    if (rank_ != 0) r = submit();
    comm_.barrier();
    r.wait();
    ASSERT_EQ(result.bytes(), 2 * p * (form ? 1 : p) * sizeof(int32_t)) << key;
    const int32_t* got = static_cast<const int32_t*>(result.data());
    for (size_t k = 0; k < result.bytes() / sizeof(int32_t); ++k)
      ASSERT_EQ(got[k], static_cast<int32_t>(form ? k / 2 + 1 : k / (2 * p) + 1))
          << key << " " << k;
  }
}

// ... but it keeps its place among the ops of its own name, which are numbered by the order
// they enter (Python submits every unnamed op under one name). Rank 0 submits a named ragged
// all-gather and an all-reduce of the same name before the others start; they submit the
// all-gather, wait for it, then the all-reduce. Had rank 0's all-reduce gone in first, it
// would be that name's first op there and the second elsewhere: a mismatch.
TEST_F(Collectives, NamedRaggedOpsKeepTheirPlaceAmongTheirName) {
  const size_t p = static_cast<size_t>(size_), me = static_cast<size_t>(rank_);
  const std::string key = "ragged.same.name";
  std::vector<int32_t> mine(2, static_cast<int32_t>(me + 1));
  prioccl::Rows result;
  int64_t one = 1, sum = 0;
  Request gather, reduce;
  if (rank_ == 0) {
    gather = comm_.allGatherRowsAsync(mine.data(), 1, 2, priocclInt32, &result, 0, key);
    reduce = comm_.allReduceAsync(&one, &sum, 1, priocclInt64, priocclSum, 0, key);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank_ != 0) {
    comm_.allGatherRowsAsync(mine.data(), 1, 2, priocclInt32, &result, 0, key).wait();
    reduce = comm_.allReduceAsync(&one, &sum, 1, priocclInt64, priocclSum, 0, key);
  } else {
    gather.wait();
  }
  reduce.wait();
  EXPECT_EQ(sum, size_);
  ASSERT_EQ(result.bytes(), 2 * p * sizeof(int32_t));
  const int32_t* got = static_cast<const int32_t*>(result.data());
  for (size_t k = 0; k < 2 * p; ++k) EXPECT_EQ(got[k], static_cast<int32_t>(k / 2 + 1)) << k;
}

TEST_F(Collectives, RaggedAllToAllMatchesMpiAlltoallv) {
  const size_t p = static_cast<size_t>(size_), me = static_cast<size_t>(rank_);
  auto pairRows = [](size_t from, size_t to) {
    return (from + 2 * to) % 4 == 3 ? 0 : 1 + (from + to) % 3;
  };
  uint64_t seed = 3500;
  for (priocclDataType_t dt : kDtypes) {
    for (size_t rowCount : {size_t{1}, size_t{5}, 2000 / kSanitizerShrink}) {
      ++seed;
      const size_t elem = sizeOf(dt);
      std::vector<size_t> sendRows(p), recvRows(p), sendCounts(p), recvCounts(p);
      size_t sendTotal = 0, recvTotal = 0;
      for (size_t j = 0; j < p; ++j) {
        sendRows[j] = pairRows(me, j);
        recvRows[j] = pairRows(j, me);
        sendCounts[j] = sendRows[j] * rowCount;
        recvCounts[j] = recvRows[j] * rowCount;
        sendTotal += sendCounts[j];
        recvTotal += recvCounts[j];
      }
      auto displs = [&](const std::vector<size_t>& counts) {
        std::vector<int> out(p);
        for (size_t k = 0, at = 0; k < p; at += counts[k++]) out[k] = static_cast<int>(at * elem);
        return out;
      };
      std::vector<unsigned char> mine = bytesOf(seed * 64 + me, sendTotal * elem);
      std::vector<unsigned char> want(recvTotal * elem);
      MPI_Alltoallv(mine.data(), mpiInts(sendCounts, elem).data(), displs(sendCounts).data(),
                    MPI_BYTE, want.data(), mpiInts(recvCounts, elem).data(),
                    displs(recvCounts).data(), MPI_BYTE, MPI_COMM_WORLD);
      const std::string label =
          "dtype " + std::to_string(dt) + " rowCount " + std::to_string(rowCount);
      prioccl::Rows result;
      Request r = seed % 2
                      ? comm_.allToAllRowsAsync(mine.data(), sendRows.data(), rowCount, dt, &result)
                      : comm_.allToAllRowsAsync(mine.data(), sendRows.data(), rowCount, dt, &result,
                                                -1, "ragged.a2a");
      int64_t one = 1, sum = 0;
      comm_.allReduce(&one, &sum, 1, priocclInt64, priocclSum);  // behind it at the door
      EXPECT_EQ(sum, size_) << label;
      r.wait();
      ASSERT_EQ(result.bytes(), want.size()) << label;
      EXPECT_EQ(firstDifference(want, static_cast<const unsigned char*>(result.data())), -1)
          << label;
      EXPECT_EQ(result.rows(), recvRows) << label;
    }
  }
}

// What the ranks disagree on fails the ragged op on every rank alike, naming it, and the
// communicator carries on: elements per row, the shape after the first dimension, the dtype, and
// a rank that failed before the op (PRIOCCL_ROWS_FAILED). Its result is not readable then; nor
// before the op has finished; nor through a freed C handle.
TEST_F(Collectives, RaggedDisagreementsFailEveryRankAndTheCommunicatorCarriesOn) {
  const int last = size_ - 1;
  std::vector<int32_t> data(64, rank_);
  auto fails = [&](size_t rows, size_t rowCount, priocclDataType_t dt, const std::string& want,
                   const std::vector<int64_t>& shape = {}) {
    if (!shape.empty()) prioccl::shapeNext(shape);
    prioccl::Rows result;
    Request r = comm_.allGatherRowsAsync(data.data(), rows, rowCount, dt, &result);
    try {
      r.wait();
      ADD_FAILURE() << "no error; wanted " << want;
    } catch (const prioccl::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    EXPECT_THROW(result.data(), prioccl::Error);
  };
  if (size_ > 1) {
    fails(2, rank_ == last ? 3 : 4, priocclInt32, "dimensions after the first");
    fails(1, 6, priocclInt32, "dimensions after the first",
          rank_ == last ? std::vector<int64_t>{3, 2} : std::vector<int64_t>{2, 3});
    fails(1, 4, rank_ == last ? priocclUint32 : priocclInt32, "differ in dtype");
  }
  fails(rank_ == last ? PRIOCCL_ROWS_FAILED : 1, 4, priocclInt32,
        "rank(s) [" + std::to_string(last) + "] failed before the op");
  // The communicator carries on, and the rows are right.
  prioccl::Rows result;
  comm_.allGatherRowsAsync(data.data(), 1, 2, priocclInt32, &result).wait();
  ASSERT_EQ(result.bytes(), static_cast<size_t>(size_) * 2 * sizeof(int32_t));
  for (int k = 0; k < size_; ++k)
    EXPECT_EQ(static_cast<const int32_t*>(result.data())[2 * k + 1], k);
  // The C handle: read, freed, then refused.
  priocclComm_t c = nullptr;
  ASSERT_EQ(priocclCommInitWorld(&c), priocclSuccess);
  priocclRows_t rows = nullptr;
  priocclRequest_t req = nullptr;
  ASSERT_EQ(priocclAllGatherRowsAsync(data.data(), static_cast<size_t>(rank_), 1, priocclInt32, 0,
                                      c, &rows, &req),
            priocclSuccess);
  ASSERT_EQ(priocclWait(req), priocclSuccess);
  std::vector<size_t> byRank(static_cast<size_t>(size_));
  size_t bytes = 0;
  const void* at = nullptr;
  ASSERT_EQ(priocclRowsGet(rows, &at, &bytes, byRank.data()), priocclSuccess);
  for (int k = 0; k < size_; ++k) EXPECT_EQ(byRank[static_cast<size_t>(k)], static_cast<size_t>(k));
  EXPECT_EQ(bytes, static_cast<size_t>(size_ * (size_ - 1) / 2) * sizeof(int32_t));
  EXPECT_EQ(priocclRowsFree(rows), priocclSuccess);
  EXPECT_EQ(priocclRowsGet(rows, &at, &bytes, nullptr), priocclInvalidUsage);
  EXPECT_EQ(priocclAllGatherRowsAsync(data.data(), 1, 1, priocclInt32, 0, c, nullptr, &req),
            priocclInvalidArgument);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(priocclCommDestroy(c), priocclSuccess);
}

// The v-variants, named and async in different orders on different ranks, beside an urgent
// all-reduce: each right on every rank.
TEST_F(Collectives, NamedVariantsInAnyOrderBesideAnUrgentAllReduce) {
  const size_t scale = 20000 / kSanitizerShrink, p = static_cast<size_t>(size_);
  const size_t me = static_cast<size_t>(rank_);
  std::vector<size_t> counts = unevenCounts(size_, scale, 0);
  size_t total = 0;
  for (size_t c : counts) total += c;
  std::vector<int32_t> mine(counts[me], rank_ + 1), gathered(total, -1);
  std::vector<int32_t> blocks(total, rank_ + 1), reduced(counts[me], -1);
  std::vector<size_t> a2aCounts(p, counts[me]), a2aRecv(counts);  // i sends j counts[i]
  std::vector<int32_t> a2aSend(counts[me] * p), a2aGot(total, -1);
  for (size_t j = 0; j < p; ++j)
    for (size_t k = 0; k < counts[me]; ++k)
      a2aSend[j * counts[me] + k] = static_cast<int32_t>(me * 1000 + j);
  std::vector<int32_t> ones(1 << 16, 1), sum(1 << 16, 0);
  std::vector<Request> reqs(3);
  for (int i = 0; i < 3; ++i) {
    switch ((i + rank_) % 3) {
      case 0:
        reqs[0] = comm_.allGatherVAsync(mine.data(), gathered.data(), counts.data(), nullptr,
                                        priocclInt32, 5, "v.gather");
        break;
      case 1:
        reqs[1] = comm_.reduceScatterVAsync(blocks.data(), reduced.data(), counts.data(),
                                            priocclInt32, priocclSum, 5, "v.scatter");
        break;
      default:
        reqs[2] = comm_.allToAllVAsync(a2aSend.data(), a2aCounts.data(), nullptr, a2aGot.data(),
                                       a2aRecv.data(), nullptr, priocclInt32, 5, "v.a2a");
    }
  }
  comm_.allReduceAsync(ones.data(), sum.data(), ones.size(), priocclInt32, priocclSum, -1).wait();
  for (Request& r : reqs) r.wait();
  EXPECT_EQ(std::count(sum.begin(), sum.end(), size_), static_cast<long>(sum.size()));
  EXPECT_EQ(std::count(reduced.begin(), reduced.end(), size_ * (size_ + 1) / 2),
            static_cast<long>(reduced.size()));
  for (size_t b = 0, at = 0; b < p; at += counts[b++])
    for (size_t k = 0; k < counts[b]; ++k) {
      ASSERT_EQ(gathered[at + k], static_cast<int32_t>(b) + 1) << "allgatherv block " << b;
      ASSERT_EQ(a2aGot[at + k], static_cast<int32_t>(b * 1000 + me)) << "alltoallv block " << b;
    }
}

// A barrier returns on no rank before the last rank has entered it (rank 0 enters 300 ms late),
// unnamed and named, blocking and async.
TEST_F(Collectives, BarrierWaitsForTheLastRank) {
  using Clock = std::chrono::steady_clock;
  for (int form = 0; form < 3; ++form) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto start = Clock::now();
    if (rank_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (form == 0) comm_.barrier();
    if (form == 1) comm_.barrierAsync(0, "named.barrier").wait();
    if (form == 2) comm_.barrierAsync(-3).wait();
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    EXPECT_GE(ms, 250.0) << "form " << form << ": left the barrier before rank 0 entered it";
  }
}

// PRIOCCL_FUSION_BYTES: a group's consecutive small all-reduces of one datatype and reduction run
// as one op (fewer ops in the engine's counters), with the results each would have alone: exact
// for integers, on every rank; floats within rounding of the exact sum and the same bits on every
// rank. A member that differs between ranks fails the fused op everywhere, naming the member.
TEST_F(Collectives, GroupFusesSmallAllReducesIntoOneOp) {
  auto run = [&](Communicator& comm, std::vector<std::vector<int32_t>>& ints,
                 std::vector<std::vector<float>>& floats) {
    const size_t intCounts[] = {100, 3000, 7}, floatCounts[] = {50, 70};
    ints.clear();
    floats.clear();
    std::vector<int32_t> in0(100, rank_ + 1), in1(3000), in2(7, 2);
    for (size_t i = 0; i < in1.size(); ++i) in1[i] = static_cast<int32_t>(i) * (rank_ + 1);
    for (size_t c : intCounts) ints.emplace_back(c, -1);
    std::vector<float> f0(50), f1(70);
    for (size_t i = 0; i < f0.size(); ++i) f0[i] = 0.1f * static_cast<float>(i + rank_) + 1e-3f;
    for (size_t i = 0; i < f1.size(); ++i) f1[i] = 1.0f / static_cast<float>(i + rank_ + 1);
    for (size_t c : floatCounts) floats.emplace_back(c, -1.0f);
    std::vector<int32_t> root(5, rank_ == 0 ? 9 : 0);
    prioccl::groupStart();
    std::vector<Request> reqs;
    reqs.push_back(comm.allReduceAsync(in0.data(), ints[0].data(), 100, priocclInt32, priocclSum, 3,
                                       "fuse.a"));
    reqs.push_back(comm.allReduceAsync(in1.data(), ints[1].data(), 3000, priocclInt32, priocclSum,
                                       1, "fuse.b"));
    // Another datatype: a run of its own.
    reqs.push_back(comm.allReduceAsync(f0.data(), floats[0].data(), 50, priocclFloat32, priocclSum,
                                       0, "fuse.c"));
    reqs.push_back(comm.allReduceAsync(f1.data(), floats[1].data(), 70, priocclFloat32, priocclSum,
                                       0, "fuse.d"));
    // Not an all-reduce: ends the run; the next is alone.
    reqs.push_back(comm.broadcastAsync(root.data(), root.data(), 5, priocclInt32, 0, 0, "fuse.e"));
    in2[0] = rank_;
    reqs.push_back(
        comm.allReduceAsync(in2.data(), ints[2].data(), 7, priocclInt32, priocclMax, 0, "fuse.f"));
    prioccl::groupEnd();
    for (Request& r : reqs) r.wait();
    EXPECT_EQ(std::count(root.begin(), root.end(), 9), 5);
  };
  prioccl::Config off = prioccl::Config::fromEnv();
  off.fusionBytes = 0;
  Communicator unfused = Communicator::world(off);
  ASSERT_GT(comm_.config().fusionBytes, 3000u * 4 + 100 * 4) << "the default fuses these";
  std::vector<std::vector<int32_t>> ints, intsAlone;
  std::vector<std::vector<float>> floats, floatsAlone;
  unsigned long long before = comm_.counters().opsSubmitted;
  run(comm_, ints, floats);
  EXPECT_EQ(comm_.counters().opsSubmitted - before, 4u) << "a+b, c+d, e, f";
  before = unfused.counters().opsSubmitted;
  run(unfused, intsAlone, floatsAlone);
  EXPECT_EQ(unfused.counters().opsSubmitted - before, 6u);
  EXPECT_EQ(ints, intsAlone);
  const int32_t ranks = size_, tri = size_ * (size_ + 1) / 2;
  EXPECT_EQ(std::count(ints[0].begin(), ints[0].end(), tri), 100);
  for (size_t i = 0; i < 3000; ++i) ASSERT_EQ(ints[1][i], static_cast<int32_t>(i) * tri) << i;
  EXPECT_EQ(ints[2][0], ranks - 1);
  for (size_t k = 0; k < 2; ++k)
    for (size_t i = 0; i < floats[k].size(); ++i) {
      double exact = 0;
      for (int r = 0; r < size_; ++r)
        exact += k == 0 ? 0.1f * static_cast<float>(i + r) + 1e-3f
                        : 1.0f / static_cast<float>(i + r + 1);
      ASSERT_NEAR(floats[k][i], exact, 1e-5 * std::max(1.0, std::abs(exact))) << k << " " << i;
    }
  // The same bits on every rank: rank 0's floats, broadcast, compared bit for bit.
  for (auto& f : floats) {
    std::vector<float> theirs = f;
    comm_.broadcast(theirs.data(), theirs.data(), theirs.size(), priocclFloat32, 0);
    EXPECT_EQ(std::memcmp(theirs.data(), f.data(), f.size() * sizeof(float)), 0);
  }
  unfused.destroy();
  if (size_ < 2) return;
  // Members that split the same total differently on rank 0 (63 + 65, elsewhere 64 + 64): the
  // fused op fails on every rank, naming them, instead of mixing their elements.
  std::vector<float> x(65, 1.0f), y(65, 1.0f);
  prioccl::groupStart();
  Request rx = comm_.allReduceAsync(x.data(), x.data(), rank_ == 0 ? 63 : 64, priocclFloat32,
                                    priocclSum, 0, "fuse.x");
  Request ry = comm_.allReduceAsync(y.data(), y.data(), rank_ == 0 ? 65 : 64, priocclFloat32,
                                    priocclSum, 0, "fuse.y");
  prioccl::groupEnd();
  std::string msg;
  try {
    ry.wait();
    ADD_FAILURE() << "a mismatched fused op succeeded";
  } catch (const prioccl::Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("fuse.y"), std::string::npos) << msg;
  EXPECT_THROW(rx.wait(), prioccl::Error);
  // Only that op failed: the communicator goes on.
  std::vector<int32_t> one(4, 1);
  comm_.allReduce(one.data(), one.data(), 4, priocclInt32, priocclSum);
  EXPECT_EQ(one[3], size_);
}

// Grouped submission: inside a group blocking calls return at once and nothing moves (the receive
// buffers keep their poison, an async request is not done); the outermost end submits everything
// and every result is right. A mismatched op in a group makes the end fail on every rank.
TEST_F(Collectives, GroupHoldsOpsUntilTheOutermostEnd) {
  const size_t n = 5000;
  std::vector<int32_t> ones(n, rank_ + 1), sum(n, -1), bcast(n, rank_ == 0 ? 7 : -1);
  std::vector<int32_t> gathered(n * static_cast<size_t>(size_), -1), mine(n, rank_);
  prioccl::groupStart();
  comm_.allReduce(ones.data(), sum.data(), n, priocclInt32, priocclSum);
  prioccl::groupStart();  // nested: its end submits nothing
  comm_.broadcast(bcast.data(), bcast.data(), n, priocclInt32, 0);
  Request gather = comm_.allGatherAsync(mine.data(), gathered.data(), n, priocclInt32, -1);
  prioccl::groupEnd();
  EXPECT_FALSE(gather.test()) << "an op in a group started before the group ended";
  EXPECT_EQ(sum[0], -1) << "a blocking all-reduce in a group ran before the group ended";
  if (rank_ != 0) {
    EXPECT_EQ(bcast[0], -1);
  }
  prioccl::groupEnd();
  gather.wait();
  EXPECT_EQ(std::count(sum.begin(), sum.end(), size_ * (size_ + 1) / 2), static_cast<long>(n));
  EXPECT_EQ(std::count(bcast.begin(), bcast.end(), 7), static_cast<long>(n));
  for (int r = 0; r < size_; ++r)
    EXPECT_EQ(gathered[static_cast<size_t>(r) * n + n - 1], r) << "block " << r;
  // The C ABI: an end without a start, and a mismatch inside a group.
  EXPECT_EQ(priocclGroupEnd(), priocclInvalidUsage);
  if (size_ > 1) {
    ASSERT_EQ(priocclGroupStart(), priocclSuccess);
    comm_.barrier();  // (returns at once: held back)
    std::vector<float> x(rank_ == 0 ? 10 : 11, 1.0f);
    EXPECT_THROW(
        {
          comm_.allReduce(x.data(), x.data(), x.size(), priocclFloat32, priocclSum);
          prioccl::groupEnd();
        },
        prioccl::InvalidUsage);
  }
  comm_.allReduce(ones.data(), sum.data(), n, priocclInt32, priocclMax);  // still works
  EXPECT_EQ(sum[n - 1], size_);
}

// Count 0 succeeds at once with no buffers, as for all-reduce.
TEST_F(Collectives, BroadcastOfNothing) {
  comm_.broadcast(nullptr, nullptr, 0, priocclFloat32, size_ - 1);
  comm_.broadcastAsync(nullptr, nullptr, 0, priocclFloat32, 0, 0, "empty").wait();
  comm_.reduce(nullptr, nullptr, 0, priocclFloat32, priocclSum, 0);
  comm_.reduceAsync(nullptr, nullptr, 0, priocclInt8, priocclMax, size_ - 1, 3, "empty").wait();
  comm_.allGather(nullptr, nullptr, 0, priocclFloat64);
  comm_.reduceScatter(nullptr, nullptr, 0, priocclFloat64, priocclAvg);
  comm_.allToAll(nullptr, nullptr, 0, priocclInt32);
  std::vector<size_t> zeros(static_cast<size_t>(size_), 0);
  comm_.allGatherV(nullptr, nullptr, zeros.data(), nullptr, priocclFloat32);
  comm_.reduceScatterV(nullptr, nullptr, zeros.data(), priocclInt64, priocclMin);
  comm_
      .allToAllVAsync(nullptr, zeros.data(), nullptr, nullptr, zeros.data(), nullptr, priocclUint8,
                      0, "empty")
      .wait();
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
