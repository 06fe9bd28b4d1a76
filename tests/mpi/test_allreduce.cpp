// Multi-rank correctness of the all-reduce: every dtype x op x size x placement against an
// independent reference, bitwise identity across ranks, determinism, many concurrent async ops.
//
// Every rank can regenerate every other rank's input (it is a hash of rank, op and index), so the
// reference needs no communication and shares no code with the library's reductions.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <ctime>
#include <iterator>
#include <mutex>
#include <random>
#include <thread>

#include "mpi_test_util.h"
#include "prioccl/prioccl.hpp"
#include "reduce/half.h"

namespace {

using prioccl::Communicator;
using prioccl::Request;
using prioccl::test::inPlaceHalf;
using prioccl::test::kDtypes;
using prioccl::test::kFirstFloat;
using prioccl::test::kNumDtypes;
using prioccl::test::kOps;
using prioccl::test::kSanitizerShrink;
using prioccl::test::mix;
using prioccl::test::sizeOf;

bool isFloat(priocclDataType_t dt) {
  return dt == priocclFloat16 || dt == priocclBfloat16 || dt == priocclFloat32 ||
         dt == priocclFloat64;
}

int worldRank() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int worldSize() {
  int s;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

struct Case {
  priocclDataType_t dt;
  priocclRedOp_t op;
  size_t count;
  bool inPlace;
  uint64_t seed;
  int priority;
  bool blocking = false;  // comm.allReduce (done when start() returns), not allReduceAsync
};

// Input element i of `rank` for case c, as stored bits.
void writeInput(const Case& c, int rank, size_t i, unsigned char* out) {
  // One hash per element (this runs p times per element checked): each (seed, rank) owns its
  // own run of 2^25 indices, more than any op's count.
  uint64_t h = mix(((c.seed * 1000003ULL + static_cast<uint64_t>(rank)) << 25) + i);
  double unit = static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0;  // [-1, 1)
  double f = c.op == priocclProd ? 1.0 + 0.5 * unit : unit;
  switch (c.dt) {
    case priocclInt8:
    case priocclUint8:
      out[0] = static_cast<unsigned char>(h);
      return;
    case priocclInt32:
    case priocclUint32: {
      uint32_t v = static_cast<uint32_t>(h);
      std::memcpy(out, &v, 4);
      return;
    }
    case priocclInt64:
    case priocclUint64:
      std::memcpy(out, &h, 8);
      return;
    case priocclFloat16: {
      uint16_t v = prioccl::reduce::floatToHalf(static_cast<float>(f));
      std::memcpy(out, &v, 2);
      return;
    }
    case priocclBfloat16: {
      uint16_t v = prioccl::reduce::floatToBf16(static_cast<float>(f));
      std::memcpy(out, &v, 2);
      return;
    }
    case priocclFloat32: {
      float v = static_cast<float>(f);
      std::memcpy(out, &v, 4);
      return;
    }
    case priocclFloat64:
      std::memcpy(out, &f, 8);
      return;
    case priocclNumTypes:
      break;
  }
}

// A small integer v as an element of dt.
void writeSmall(priocclDataType_t dt, int v, unsigned char* out) {
  auto put = [out](auto x) { std::memcpy(out, &x, sizeof x); };
  switch (dt) {
    case priocclInt8:
    case priocclUint8:
      return put(static_cast<int8_t>(v));
    case priocclInt32:
    case priocclUint32:
      return put(static_cast<int32_t>(v));
    case priocclInt64:
    case priocclUint64:
      return put(static_cast<int64_t>(v));
    case priocclFloat16:
      return put(prioccl::reduce::floatToHalf(static_cast<float>(v)));
    case priocclBfloat16:
      return put(prioccl::reduce::floatToBf16(static_cast<float>(v)));
    case priocclFloat32:
      return put(static_cast<float>(v));
    case priocclFloat64:
      return put(static_cast<double>(v));
    case priocclNumTypes:
      break;
  }
}

double readFloat(priocclDataType_t dt, const unsigned char* p) {
  uint16_t h;
  float f;
  double d;
  switch (dt) {
    case priocclFloat16:
      std::memcpy(&h, p, 2);
      return prioccl::reduce::halfToFloat(h);
    case priocclBfloat16:
      std::memcpy(&h, p, 2);
      return prioccl::reduce::bf16ToFloat(h);
    case priocclFloat32:
      std::memcpy(&f, p, 4);
      return f;
    default:
      std::memcpy(&d, p, 8);
      return d;
  }
}

// Integers as their two's-complement bits widened to 64 (sign-extended for signed types).
int64_t readInt(priocclDataType_t dt, const unsigned char* p) {
  switch (dt) {
    case priocclInt8:
      return static_cast<int8_t>(p[0]);
    case priocclUint8:
      return p[0];
    case priocclInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case priocclUint32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

// Wraps a 64-bit value to the type's width, keeping the type's signedness.
int64_t wrapTo(priocclDataType_t dt, uint64_t v) {
  switch (dt) {
    case priocclInt8:
      return static_cast<int8_t>(static_cast<uint8_t>(v));
    case priocclUint8:
      return static_cast<uint8_t>(v);
    case priocclInt32:
      return static_cast<int32_t>(static_cast<uint32_t>(v));
    case priocclUint32:
      return static_cast<uint32_t>(v);
    default:
      return static_cast<int64_t>(v);
  }
}

double unitRoundoff(priocclDataType_t dt) {
  switch (dt) {
    case priocclFloat16:
      return 0x1.0p-11;
    case priocclBfloat16:
      return 0x1.0p-8;
    case priocclFloat32:
      return 0x1.0p-24;
    default:
      return 0x1.0p-53;
  }
}

// Checks elements [begin, end) of result against the reference; returns the number of wrong
// elements, describing the first.
size_t countWrong(const Case& c, const unsigned char* result, int p, std::string* first,
                  size_t begin = 0, size_t end = SIZE_MAX) {
  size_t es = sizeOf(c.dt), wrong = 0;
  std::vector<unsigned char> in(es);
  for (size_t i = begin; i < std::min(end, c.count); ++i) {
    const unsigned char* got = result + i * es;
    bool ok;
    double expectShown = 0;
    if (!isFloat(c.dt)) {
      uint64_t acc = c.op == priocclProd ? 1 : 0;
      int64_t best = 0;
      for (int r = 0; r < p; ++r) {
        writeInput(c, r, i, in.data());
        int64_t v = readInt(c.dt, in.data());
        if (c.op == priocclSum || c.op == priocclAvg) acc += static_cast<uint64_t>(v);
        if (c.op == priocclProd) acc *= static_cast<uint64_t>(v);
        // uint64 compares as unsigned (the other types' values fit int64 exactly).
        const bool less = c.dt == priocclUint64
                              ? static_cast<uint64_t>(v) < static_cast<uint64_t>(best)
                              : v < best;
        const bool more = c.dt == priocclUint64
                              ? static_cast<uint64_t>(v) > static_cast<uint64_t>(best)
                              : v > best;
        if (r == 0 || (c.op == priocclMin ? less : more)) best = v;
      }
      int64_t expect = (c.op == priocclMin || c.op == priocclMax) ? best : wrapTo(c.dt, acc);
      if (c.op == priocclAvg) {  // truncating division, as documented; unsigned for uint64
        expect =
            c.dt == priocclUint64
                ? static_cast<int64_t>(static_cast<uint64_t>(expect) / static_cast<uint64_t>(p))
                : expect / p;
      }
      ok = readInt(c.dt, got) == expect;
      expectShown = static_cast<double>(expect);
    } else {
      long double acc = c.op == priocclProd ? 1 : 0, mag = 0, best = 0;
      for (int r = 0; r < p; ++r) {
        writeInput(c, r, i, in.data());
        long double v = readFloat(c.dt, in.data());
        if (c.op == priocclProd)
          acc *= v;
        else
          acc += v;
        mag += std::fabs(v);
        if (r == 0 || (c.op == priocclMin ? v < best : v > best)) best = v;
      }
      double g = readFloat(c.dt, got);
      double u = unitRoundoff(c.dt);
      if (c.op == priocclMin || c.op == priocclMax) {
        ok = g == static_cast<double>(best);  // no rounding involved: exact
        expectShown = static_cast<double>(best);
      } else {
        if (c.op == priocclAvg) {
          acc /= p;
          mag /= p;
        }
        // Each of the p-1 ring steps (and the final division) rounds once.
        long double bound = (p + 1) * u * (c.op == priocclProd ? std::fabs(acc) : mag) + 1e-300L;
        ok = std::fabs(static_cast<long double>(g) - acc) <= bound;
        expectShown = static_cast<double>(acc);
      }
      if (ok && std::isnan(g)) ok = false;
    }
    if (!ok && wrong++ == 0 && first) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "element %zu: expected %.17g, got %.17g", i, expectShown,
                    isFloat(c.dt) ? readFloat(c.dt, got) : static_cast<double>(readInt(c.dt, got)));
      *first = buf;
    }
  }
  return wrong;
}

// A fingerprint of n bytes for comparing buffers (not an adversary's): four independent
// multiply-xor lanes over 8-byte words, then the tail, mixed. It runs over up to 64 MiB per op.
uint64_t hashBytes(const unsigned char* p, size_t n) {
  uint64_t h[4] = {mix(n), mix(n + 1), mix(n + 2), mix(n + 3)};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      h[k] = (h[k] ^ w) * 0x9e3779b97f4a7c15ULL;
      h[k] ^= h[k] >> 29;
    }
  uint64_t out = mix(h[0] ^ mix(h[1] ^ mix(h[2] ^ mix(h[3]))));
  for (; i < n; ++i) out = mix(out ^ p[i]);
  return out;
}

// True when every rank passed the same hash.
bool sameOnAllRanks(uint64_t hash) {
  std::vector<uint64_t> all(worldSize());
  MPI_Allgather(&hash, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  return std::all_of(all.begin(), all.end(), [&](uint64_t h) { return h == all[0]; });
}

std::string describe(const Case& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "dtype=%d op=%d count=%zu %s seed=%llu", static_cast<int>(c.dt),
                static_cast<int>(c.op), c.count, c.inPlace ? "in-place" : "out-of-place",
                static_cast<unsigned long long>(c.seed));
  return buf;
}

// One op's buffers, submitted asynchronously and verified after completion.
struct Running {
  Case c;
  std::vector<unsigned char> send, recv;
  uint64_t sendHash = 0;  // of the input, to show an out-of-place op left it alone
  Request req;
  const unsigned char* result() const { return c.inPlace ? send.data() : recv.data(); }
};

// Fills an op's buffers without submitting it (submit() does).
std::unique_ptr<Running> prepare(const Communicator& comm, const Case& c) {
  auto r = std::make_unique<Running>();
  r->c = c;
  size_t es = sizeOf(c.dt);
  r->send.resize(c.count * es + 1);  // +1: never a zero-size vector with a null data()
  const int me = comm.rank();
  for (size_t i = 0; i < c.count; ++i) writeInput(c, me, i, r->send.data() + i * es);
  if (!c.inPlace) r->recv.assign(c.count * es + 1, 0xAB);
  r->sendHash = hashBytes(r->send.data(), c.count * es);
  return r;
}

void submit(Communicator& comm, Running& r) {
  const Case& c = r.c;
  void* out = c.inPlace ? r.send.data() : r.recv.data();
  if (c.blocking)
    comm.allReduce(r.send.data(), out, c.count, c.dt, c.op);
  else
    r.req = comm.allReduceAsync(r.send.data(), out, c.count, c.dt, c.op, c.priority);
}

std::unique_ptr<Running> start(Communicator& comm, const Case& c) {
  auto r = prepare(comm, c);
  submit(comm, *r);
  return r;
}

// Waits for all, then checks values, cross-rank identity, and that out-of-place left sendbuf alone.
// The ranks' results must be bitwise identical (a hash of every byte, compared across ranks), so
// each rank checks its own share of the elements against the reference: together they check
// every element once, at 1/p of the cost of each checking all (p ranks share 2 cores here, and
// the reference reads p inputs per element).
void finishAndCheck(Communicator& comm, std::vector<std::unique_ptr<Running>>& ops,
                    std::vector<uint64_t>* hashes = nullptr) {
  for (auto& r : ops)
    if (r->req.valid()) r->req.wait();
  const size_t p = static_cast<size_t>(comm.size()), me = static_cast<size_t>(comm.rank());
  for (auto& r : ops) {
    const Case& c = r->c;
    size_t bytes = c.count * sizeOf(c.dt);
    std::string first;
    const size_t begin = c.count * me / p, end = c.count * (me + 1) / p;
    size_t wrong = countWrong(c, r->result(), comm.size(), &first, begin, end);
    EXPECT_EQ(wrong, 0u) << describe(c) << ": " << first << " (elements " << begin << "-" << end
                         << " checked on rank " << me << ")";
    uint64_t h = hashBytes(r->result(), bytes);
    EXPECT_TRUE(sameOnAllRanks(h)) << describe(c) << ": ranks disagree bitwise";
    if (hashes) hashes->push_back(h);
    if (!c.inPlace) {
      EXPECT_EQ(hashBytes(r->send.data(), bytes), r->sendHash)
          << describe(c) << ": sendbuf was modified";
    }
  }
}

std::vector<size_t> matrixSizes(int p, size_t big) {
  std::vector<size_t> s = {
      0,     1,     static_cast<size_t>(p > 1 ? p - 1 : 2), static_cast<size_t>(p + 1), 7, 13, 1009,
      16383, 16385,  // float32 just inside and outside what rides in the agreement (64 KiB)
      65537, big};
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

// The matrix, all ops of one size in flight together with random priorities: every size x
// datatype x op, each once, half of them in place (inPlaceHalf).
void runMatrix(Communicator& comm, size_t big, uint64_t seedBase) {
  std::mt19937 rng(1234);  // same on every rank: every rank submits the same ops in the same order
  size_t sizeIndex = 0;
  for (size_t count : matrixSizes(comm.size(), big)) {
    std::vector<std::unique_ptr<Running>> ops;
    for (size_t d = 0; d < kNumDtypes; ++d)
      for (size_t o = 0; o < std::size(kOps); ++o) {
        Case c{kDtypes[d],
               kOps[o],
               count,
               inPlaceHalf({d, o, sizeIndex}),
               seedBase + ops.size() + count * 1000,
               static_cast<int>(rng() % 7) - 3};
        ops.push_back(start(comm, c));
      }
    finishAndCheck(comm, ops);
    ++sizeIndex;
  }
}

TEST(AllReduce, MatrixDefaultConfig) {
  Communicator comm = Communicator::world();
  // 0.6-4.8 MB per op (a quarter under sanitizers): many default chunks, not divisible by p.
  runMatrix(comm, 600011 / kSanitizerShrink, 1);
}

TEST(AllReduce, MatrixEachAlgorithm) {
  for (int a = priocclAlgoAuto + 1; a < priocclNumAlgos; ++a) {  // every algorithm there is
    const auto algo = static_cast<priocclAlgorithm_t>(a);
    SCOPED_TRACE(prioccl::algorithmName(algo));
    prioccl::Config cfg = prioccl::Config::fromEnv();
    cfg.algorithm = algo;
    Communicator comm = Communicator::world(cfg);
    EXPECT_NE(comm.algorithmModel().find(prioccl::algorithmName(algo)), std::string::npos);
    runMatrix(comm, 300007 / kSanitizerShrink, 3 + algo);
  }
}

// Hosts emulated on one machine with PRIOCCL_HOST_ID (Config::hostId): the host of each rank,
// by rank count. Even, uneven (3 + 2: an extra rank gathered and scattered), one host (the
// intra-host rings only), one rank per host (the ring across only).
std::vector<std::vector<int>> hostShapes(int p) {
  switch (p) {
    case 2:
      return {{0, 1}};
    case 3:
      return {{0, 0, 1}};
    case 4:
      return {{0, 0, 1, 1}, {0, 0, 0, 0}};
    case 5:
      return {{0, 0, 0, 1, 1}};
    default:
      return {};
  }
}

prioccl::Config onHosts(const std::vector<int>& shape, priocclAlgorithm_t algo) {
  prioccl::Config cfg = prioccl::Config::fromEnv();
  cfg.algorithm = algo;
  cfg.hostId = "emulated-host-" + std::to_string(shape[static_cast<size_t>(worldRank())]);
  return cfg;
}

std::string shapeName(const std::vector<int>& shape) {
  std::string s = "hosts of ranks:";
  for (int h : shape) s += " " + std::to_string(h);
  return s;
}

TEST(AllReduce, MatrixHierarchicalHosts) {
  if (hostShapes(worldSize()).empty()) GTEST_SKIP() << "no host shape for this rank count";
  for (const std::vector<int>& shape : hostShapes(worldSize())) {
    SCOPED_TRACE(shapeName(shape));
    Communicator comm = Communicator::world(onHosts(shape, priocclAlgoHierarchical));
    runMatrix(comm, 300007 / kSanitizerShrink, 40);
  }
}

// Where the order of a reduction cannot change its bits (integers, min/max, float sums and
// products of small integers), the two-level all-reduce must give exactly the flat ring's bits.
TEST(AllReduce, HierarchicalSameBitsAsRing) {
  if (hostShapes(worldSize()).empty()) GTEST_SKIP() << "no host shape for this rank count";
  const size_t n = 100003 / kSanitizerShrink;
  for (const std::vector<int>& shape : hostShapes(worldSize())) {
    SCOPED_TRACE(shapeName(shape));
    Communicator hier = Communicator::world(onHosts(shape, priocclAlgoHierarchical));
    Communicator ring = Communicator::world(onHosts(shape, priocclAlgoRing));
    for (auto dt : kDtypes)
      for (auto op : kOps) {
        SCOPED_TRACE("dtype " + std::to_string(dt) + " op " + std::to_string(op));
        const size_t elem = sizeOf(dt);
        std::vector<unsigned char> in(n * elem), a(n * elem), b(n * elem);
        for (size_t i = 0; i < n; ++i) {
          uint64_t h = mix(i * 31 + static_cast<uint64_t>(worldRank()));
          // Products stay within +-2^5, sums within +-15: exact in every type.
          int v = op == priocclProd ? static_cast<int>(h % 2) + 1 : static_cast<int>(h % 7) - 3;
          if (op == priocclProd && (h >> 8) % 2) v = -v;
          writeSmall(dt, v, in.data() + i * elem);
        }
        hier.allReduce(in.data(), a.data(), n, dt, op);
        ring.allReduce(in.data(), b.data(), n, dt, op);
        ASSERT_TRUE(a == b) << "hierarchical and ring results differ";
      }
  }
}

TEST(AllReduce, MatrixTinyChunksSmallWindow) {
  // Hundreds of chunks per op through an 8-chunk window and a 16 KiB credit: exercises the
  // activation window, tag reuse and the oldest-chunk credit bypass.
  prioccl::Config cfg = prioccl::Config::fromEnv();
  cfg.chunkBytes = 4096 + 24;
  cfg.creditBytes = 16384;
  cfg.windowChunks = 8;
  Communicator comm = Communicator::world(cfg);
  runMatrix(comm, 100003 / kSanitizerShrink, 2);
}

TEST(AllReduce, BlockingMatchesMpiAllreduce) {
  Communicator comm = Communicator::world();
  const size_t n = 1 << 20;  // 4 MiB of int32
  std::vector<int32_t> mine(n), ours(n), mpi(n);
  for (size_t i = 0; i < n; ++i) mine[i] = static_cast<int32_t>(mix(i + 77 * comm.rank()));
  MPI_Allreduce(mine.data(), mpi.data(), static_cast<int>(n), MPI_INT32_T, MPI_SUM, MPI_COMM_WORLD);
  comm.allReduce(mine.data(), ours.data(), n, priocclSum);
  EXPECT_EQ(ours, mpi);
  comm.allReduce(mine.data(), mine.data(), n, priocclSum);  // in place
  EXPECT_EQ(mine, mpi);
}

// Blocking unnamed ops up to 64 KiB on an idle engine take the inline path (engine_inline.cpp);
// a rank whose engine is busy takes the lanes for the same ops. Every dtype and op on both,
// mixed in one job: the paths must agree on identities, tags and messages, and give the same
// bits. Sizes straddle the inline limit (ChunkRunner::kCarryMaxBytes).
// Blocking small ops are reduced by their agreement, inline on an idle engine and on the lanes on
// a busy one, on recursive doubling's rounds (auto picks it for most of these sizes) or on
// halving-doubling's.
void blockingSmallOps(Communicator& comm) {
  int p = comm.size(), me = comm.rank();
  for (int busy = -1; busy < std::min(p, 3); ++busy) {  // -1: every rank idle, all inline
    SCOPED_TRACE("busy rank " + std::to_string(busy));
    // The busy rank's engine is kept from idling by a receive its peer sends only at the end.
    int peer = (busy + 1) % p;
    std::vector<int32_t> token(4, 0);
    Request held;
    bool holds = p > 1 && busy >= 0 && me == busy, sends = p > 1 && busy >= 0 && me == peer;
    if (holds) held = comm.recvAsync(token.data(), token.size(), priocclInt32, peer, 5);
    uint64_t seed = 9000 + 100 * static_cast<uint64_t>(busy + 1);
    for (size_t count : {size_t{1}, size_t{3}, size_t{100}, size_t{2049}})
      for (auto dt : kDtypes)
        for (auto op : kOps) {
          std::vector<std::unique_ptr<Running>> ops;
          ops.push_back(start(comm, Case{dt, op, count, count % 2 == 1, seed++, 0, true}));
          finishAndCheck(comm, ops);
        }
    // The inline limit and just past it, in int32 and float64.
    for (size_t bytes : {size_t{64} << 10, (size_t{64} << 10) + 8})
      for (auto dt : {priocclInt32, priocclFloat64}) {
        std::vector<std::unique_ptr<Running>> ops;
        ops.push_back(
            start(comm, Case{dt, priocclSum, bytes / sizeOf(dt), false, seed++, 0, true}));
        finishAndCheck(comm, ops);
      }
    if (sends) {
      std::vector<int32_t> go = {1, 2, 3, 4};
      comm.sendAsync(go.data(), go.size(), priocclInt32, busy, 5).wait();
    }
    if (holds) {
      held.wait();
      EXPECT_EQ(token, (std::vector<int32_t>{1, 2, 3, 4}));
    }
  }
}

TEST(AllReduce, BlockingSmallOpsInlineAndOnTheLanesAgree) {
  for (priocclAlgorithm_t algo : {priocclAlgoAuto, priocclAlgoHalvingDoubling}) {
    SCOPED_TRACE(prioccl::algorithmName(algo));
    prioccl::Config cfg = prioccl::Config::fromEnv();
    cfg.algorithm = algo;
    Communicator comm = Communicator::world(cfg);
    blockingSmallOps(comm);
  }
}

TEST(AllReduce, RepeatedRunsAndPlacementsAreBitwiseIdentical) {
  Communicator comm = Communicator::world();
  for (auto dt : {priocclFloat16, priocclBfloat16, priocclFloat32, priocclFloat64}) {
    std::vector<uint64_t> hashes;
    for (int run = 0; run < 3; ++run) {
      std::vector<std::unique_ptr<Running>> ops;
      ops.push_back(start(comm, Case{dt, priocclSum, 777777, run == 1, 42, 0}));
      finishAndCheck(comm, ops, &hashes);
    }
    EXPECT_EQ(hashes[0], hashes[1]) << "in-place and out-of-place differ, dtype " << dt;
    EXPECT_EQ(hashes[0], hashes[2]) << "a repeated run differs, dtype " << dt;
  }
}

TEST(AllReduce, ThousandsOfConcurrentRandomOps) {
  prioccl::Config cfg = prioccl::Config::fromEnv();
  cfg.chunkBytes = 64 * 1024;  // so that mid-size ops span several chunks
  Communicator comm = Communicator::world(cfg);
  std::mt19937_64 rng(99);  // identical op sequence on every rank
  std::vector<std::unique_ptr<Running>> ops;
  for (size_t k = 0; k < 2000 / kSanitizerShrink; ++k) {
    size_t count = rng() % 4 == 0 ? rng() % (200000 / kSanitizerShrink) : rng() % 2000;
    Case c{kDtypes[rng() % kNumDtypes],
           kOps[rng() % 5],
           count,
           rng() % 2 == 0,
           5000 + static_cast<uint64_t>(k),
           static_cast<int>(rng() % 2001) - 1000};
    ops.push_back(start(comm, c));
  }
  // Wait in an order that differs from submission and between ranks, then verify everything
  // (in submission order, since the cross-rank comparison is collective).
  std::vector<size_t> order(ops.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(7 + comm.rank()));
  for (size_t i : order) ops[i]->req.wait();
  finishAndCheck(comm, ops);
}

TEST(AllReduce, ApplicationCallsMpiConcurrently) {
  // Frameworks keep calling MPI beside the library; with MPI_THREAD_MULTIPLE that must be safe.
  Communicator comm = Communicator::world();
  std::vector<std::unique_ptr<Running>> ops;
  for (int k = 0; k < 40; ++k)
    ops.push_back(start(comm, Case{priocclFloat32, priocclSum, 50000, false, 900u + k, k % 5}));
  std::thread app([&] {
    for (int k = 0; k < 200; ++k) {
      int v = k, sum = 0;
      MPI_Allreduce(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      EXPECT_EQ(sum, k * worldSize());
    }
  });
  app.join();
  finishAndCheck(comm, ops);
}

TEST(AllReduce, SubCommunicatorsRunSideBySide) {
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, worldRank() % 2, worldRank(), &half);
  Communicator world = Communicator::world();
  Communicator sub = Communicator::fromMpi(&half);
  int subSize;
  MPI_Comm_size(half, &subSize);
  EXPECT_EQ(sub.size(), subSize);
  std::vector<std::unique_ptr<Running>> a, b;
  for (int k = 0; k < 10; ++k) {
    a.push_back(start(world, Case{priocclInt64, priocclSum, 30011, false, 300u + k, 0}));
    b.push_back(start(sub, Case{priocclInt32, priocclMax, 20011, true, 400u + k, 0}));
  }
  for (auto& r : b) r->req.wait();
  for (auto& r : b) {
    // The reference for the half-communicator: regenerate its members' inputs by sub rank.
    std::string first;
    EXPECT_EQ(countWrong(r->c, r->result(), sub.size(), &first), 0u) << first;
  }
  finishAndCheck(world, a);
  sub.destroy();
  MPI_Comm_free(&half);
}

TEST(AllReduce, CompletionCallbackRunsOnce) {
  Communicator comm = Communicator::world();
  std::vector<float> x(100000, 1.0f);
  std::atomic<int> calls{0};
  std::atomic<int> code{-1};
  Request r = comm.allReduceAsync(x.data(), x.data(), x.size(), priocclSum, 0);
  r.onComplete([&](priocclResult_t c, const std::string&) {
    code = c;
    ++calls;
  });
  r.wait();
  // The callback runs on the progress thread before or right after wait() returns.
  for (int i = 0; i < 1000 && calls.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(code.load(), priocclSuccess);
  EXPECT_EQ(x[0], static_cast<float>(comm.size()));
  int late = 0;
  r.onComplete([&](priocclResult_t, const std::string&) { ++late; });  // already done: runs now
  EXPECT_EQ(late, 1);
}

TEST(AllReduce, NamedOpsMatchAcrossDifferentSubmissionOrders) {
  // Each rank submits the same named ops in its own random order, from two threads; ops are
  // matched by (key, occurrence), so every result is still right.
  Communicator comm = Communicator::world();
  const int kCount = 400;
  std::vector<std::unique_ptr<Running>> ops(kCount);
  std::vector<Case> cases;
  std::mt19937_64 rng(4242);  // cases identical on every rank
  for (int k = 0; k < kCount; ++k)
    cases.push_back(Case{kDtypes[rng() % kNumDtypes], kOps[rng() % 5],
                         rng() % 3 == 0 ? rng() % 150000 : rng() % 3000, rng() % 2 == 0, 7000u + k,
                         static_cast<int>(rng() % 11)});
  // Ops sharing a key keep their relative order on every rank; distinct keys go in any order.
  std::vector<std::vector<int>> byKey(50);
  for (int k = 0; k < kCount; ++k) byKey[k % 50].push_back(k);
  std::vector<int> keyOrder(50);
  for (int i = 0; i < 50; ++i) keyOrder[i] = i;
  std::shuffle(keyOrder.begin(), keyOrder.end(), std::mt19937(comm.rank() * 31 + 5));
  std::mutex m;
  auto submitter = [&](int half) {
    for (int i = half; i < 50; i += 2)
      for (int k : byKey[keyOrder[i]]) {
        const Case& c = cases[k];
        auto r = prepare(comm, c);
        void* out = c.inPlace ? r->send.data() : r->recv.data();
        r->req = comm.allReduceAsync(r->send.data(), out, c.count, c.dt, c.op, c.priority,
                                     "layer" + std::to_string(k % 50));
        std::lock_guard<std::mutex> lock(m);
        ops[k] = std::move(r);
      }
  };
  std::thread a(submitter, 0), b(submitter, 1);
  a.join();
  b.join();
  finishAndCheck(comm, ops);
}

TEST(AllReduce, FifoAndPriorityGiveIdenticalBits) {
  std::vector<uint64_t> hashes[2];
  for (int fifo = 0; fifo < 2; ++fifo) {
    prioccl::Config cfg = prioccl::Config::fromEnv();
    cfg.schedule = fifo ? priocclScheduleFifo : priocclSchedulePriority;
    // Fixed sizes: "auto" derives them from a link measurement at creation, which may differ
    // between the two communicators on a busy machine, and the chunking decides the order in
    // which floats are summed. The claim is that the schedule never changes the bits.
    cfg.chunkBytes = 256 << 10;
    cfg.creditBytes = 1 << 20;
    Communicator comm = Communicator::world(cfg);
    std::vector<std::unique_ptr<Running>> ops;
    for (int k = 0; k < 24; ++k)
      ops.push_back(start(comm, Case{kDtypes[kFirstFloat + k % 4], priocclSum, 100000u + 977u * k,
                                     k % 2 == 0, 333u + k, (k * 7) % 5}));
    finishAndCheck(comm, ops, &hashes[fifo]);
  }
  EXPECT_EQ(hashes[0], hashes[1]);
}

TEST(AllReduce, UrgentOpPreemptsARunningLowPriorityOp) {
  // A 64 MiB low-priority op (priority 100) is on the wire on every rank; then a 256 KiB urgent
  // op (-1) arrives. Under priority scheduling the urgent op finishes while the low one is still
  // running, on every rank, and the engine counts preemptions; under FIFO it finishes after the
  // low op on every rank and nothing is preempted. Both stay correct. With ring, tree and
  // hierarchical chunks (the last on hosts of two ranks emulated with PRIOCCL_HOST_ID: intra-host
  // steps must give way too).
  //
  // The order is read from the requests, not from clocks, and when the urgent op ends, on the
  // thread that ends it: its completion callback asks whether the low op is still running. (Read
  // after wait() returned, it would also count low chunks that finish while this thread wakes.)
  //
  // One chunk of in-order window (windowChunks = 1) in both halves makes FIFO's order exact: an
  // op's chunk activates in lane order only once every chunk before it in the lane, the low op's
  // last one included, has finished on this rank (lane_table.h), so under FIFO, or with priorities
  // ignored, the urgent op cannot finish first on any rank, however the ranks are scheduled. (With
  // the default window of 1024 chunks the urgent chunks are live from the start and only the ready
  // heap's order keeps them behind: it did here, but nothing forbids them a send while the low
  // chunks wait on peers.) Under priority scheduling they activate beyond the window
  // (nextByPriority). Over a collective backend (mpi-coll: no lanes, no window) FIFO launches the
  // urgent op after the low op's last launch, but those two may be in flight together
  // (CollectiveRunner::kInFlight) and MPI may complete them in either order, so there the FIFO
  // half checks only that nothing was preempted.
  //
  // What timing remains is on the priority side: the low op must still be running when the
  // urgent op is submitted. Both ops' inputs are written before either is submitted, so only the
  // poll for the low op's first send separates the two submissions, but a rank descheduled there
  // for the whole low op (CI lost that race twice: ucx_sm, tree) submits the urgent op too late.
  // So a priority run gets up to three attempts and fails only if the urgent op lost on some rank
  // in all three. That cannot hide a scheduler that ignores priorities: with the one-chunk window
  // the urgent op then loses every attempt on every rank (exactly what the FIFO half asserts).
  constexpr int kAttempts = 3;
  // The low op's buffers by attempt, written once and kept across the runs: its 16M inputs per
  // rank cost more than the op (CI's time). Out of place, the inputs stay as written (checked).
  std::unique_ptr<Running> lowInputs[kAttempts];
  for (int run = 0; run < 6; ++run) {
    int fifo = run % 2;
    priocclAlgorithm_t algo = run < 2   ? priocclAlgoRing
                              : run < 4 ? priocclAlgoTree
                                        : priocclAlgoHierarchical;
    SCOPED_TRACE(std::string(prioccl::algorithmName(algo)) + (fifo ? ", fifo" : ", priority"));
    prioccl::Config cfg = prioccl::Config::fromEnv();
    cfg.schedule = fifo ? priocclScheduleFifo : priocclSchedulePriority;
    cfg.algorithm = algo;
    cfg.windowChunks = 1;
    if (algo == priocclAlgoHierarchical) cfg.hostId = std::to_string(worldRank() / 2);
    Communicator comm = Communicator::world(cfg);
    if (comm.size() == 1) GTEST_SKIP() << "one rank has no wire to preempt";
    const bool lanes = comm.config().transport == priocclTransportMpi ||
                       comm.config().transport == priocclTransportUcx;
    int everywhere = 0, somewhere = 0, attempts = 0;
    unsigned long long opsSubmitted = 0;
    for (; attempts < (fifo ? 1 : kAttempts) && !everywhere; ++attempts) {
      // Full size even under a sanitizer: it slows the urgent op's control path far more than
      // the low op's copies, and a quarter-size low op then ended first in all three attempts
      // (ASan, ucx_sm, tree).
      std::vector<std::unique_ptr<Running>> low, urgent;
      std::unique_ptr<Running>& kept = lowInputs[attempts];
      if (kept) {
        std::fill(kept->recv.begin(), kept->recv.end(), 0xAB);  // as prepare() leaves it
      } else {
        kept = prepare(
            comm, Case{priocclFloat32, priocclSum, 16u << 20, false, 11u + 2u * attempts, 100});
      }
      low.push_back(std::move(kept));
      urgent.push_back(prepare(
          comm, Case{priocclFloat32, priocclSum, 64u << 10, false, 12u + 2u * attempts, -1}));
      unsigned long long postedBefore = comm.counters().sendsPosted;
      submit(comm, *low[0]);
      // The urgent op follows as soon as the low op is on this rank's wire. No barrier between:
      // the low op cannot finish before every rank has joined it, and each rank submits the
      // urgent op microseconds after joining. A barrier there made the race worse: it let the low
      // op run on while one rank was descheduled.
      while (comm.counters().sendsPosted == postedBefore)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      submit(comm, *urgent[0]);
      std::atomic<int> endedFirst{-1};
      urgent[0]->req.onComplete(
          [&endedFirst, lowReq = low[0]->req](priocclResult_t, const std::string&) {
            endedFirst = lowReq.status() == priocclInProgress ? 1 : 0;
          });
      urgent[0]->req.wait();
      while (endedFirst.load() < 0)  // the callback runs as wait() returns
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      int urgentFirst = endedFirst.load();
      MPI_Allreduce(&urgentFirst, &everywhere, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(&urgentFirst, &somewhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      finishAndCheck(comm, low);
      low[0]->req = Request();  // done; dropped while its communicator lives
      kept = std::move(low[0]);
      finishAndCheck(comm, urgent);
      opsSubmitted += 2;
    }
    priocclCounters_t c = comm.counters();
    // A rank whose low chunks all happened to wait on peers when the urgent op arrived switched
    // nothing, so preemptions are counted over all ranks (the exact order on the wire is
    // unit.test_scheduler's job).
    unsigned long long preemptions = 0;
    MPI_Allreduce(&c.preemptions, &preemptions, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (fifo) {
      if (lanes) {
        EXPECT_FALSE(somewhere) << "under FIFO the urgent op finished before the low-priority op "
                                << "on some rank";
      }
      EXPECT_EQ(preemptions, 0u);
    } else {
      EXPECT_TRUE(everywhere) << "the low-priority op finished before the urgent one on some rank, "
                              << "in all " << attempts << " attempts";
      EXPECT_GT(preemptions, 0u);
      if (attempts > 1)
        std::printf("[ note ] urgent op won on attempt %d of %d\n", attempts, kAttempts);
    }
    EXPECT_EQ(c.opsCompleted, opsSubmitted);
    EXPECT_EQ(c.opsFailed, 0u);
  }
}

double processCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

TEST(AllReduce, IdleProgressThreadDoesNotSpin) {
  // Ranks share cores (5 on 2 here): an idle communicator must block, not poll. CPU time, not
  // wall time, is measured, so a loaded machine cannot make this pass or fail by luck.
  Communicator comm = Communicator::world();
  std::vector<float> x(1000, 1.0f);
  comm.allReduce(x.data(), x.data(), x.size(), priocclSum);  // the engine has run at least once
  MPI_Barrier(MPI_COMM_WORLD);
  double before = processCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  double used = processCpuSeconds() - before;
  EXPECT_LT(used, 0.05) << "process used " << used << " s of CPU in 1 s of idling";
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
