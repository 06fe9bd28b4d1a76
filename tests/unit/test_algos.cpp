// Every per-chunk algorithm, proven in one process: a deterministic simulator drives one instance
// per rank and chunk the way the engine does (receives posted eagerly after creation and after
// every completion, sends taken only while sendReady), pairs each send with its receive by
// (chunk, source, destination, step), and delivers the pairs and every single completion in a
// seeded random order. It checks the MPI buffer rules on the way and the results at the end.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "algo/halving_doubling.h"
#include "algo/host_layout.h"
#include "algo/recursive_doubling.h"
#include "algo/registry.h"
#include "algo/ring.h"
#include "algo/tree.h"
#include "common/scratch_pool.h"
#include "reduce/half.h"
#include "reduce/reduce.h"

namespace {

using prioccl::ChunkAlgo;
using prioccl::ChunkSpec;
using prioccl::ScratchPool;
using prioccl::Transfer;
using prioccl::TreeLinks;
using prioccl::reduce::dtypeSize;

// ---- The algorithms under test: every row of the registry (algo/registry.cpp), so that a new
// algorithm is simulated as soon as it is registered.

using Algo = prioccl::AlgoEntry;
const std::vector<Algo>& kAlgos = prioccl::algoRegistry();

// Test names as before the registry: the long names where an algorithm has one.
std::string testName(const Algo& a) {
  return *a.alias ? a.alias : a.name;
}

// ---- The simulator.

struct RankBuffers {
  std::vector<unsigned char> send, recv;  // in place: only recv is used
};

struct Case {
  const Algo* algo;
  int p;
  size_t count;  // elements per chunk
  int chunks;    // chunks of the op, all in flight at once
  priocclDataType_t dtype;
  priocclRedOp_t op;
  bool inPlace;
  const prioccl::HostLayout* hosts = nullptr;  // the hierarchical all-reduce's hosts
};

std::string describe(const Case& c) {
  return testName(*c.algo) + " p=" + std::to_string(c.p) + " count=" + std::to_string(c.count) +
         " chunks=" + std::to_string(c.chunks) + " " + prioccl::reduce::dtypeName(c.dtype) + " " +
         prioccl::reduce::opName(c.op) + (c.inPlace ? " in-place" : " out-of-place") +
         (c.hosts ? " hosts " + c.hosts->describe() : "");
}

class Simulator {
 public:
  Simulator(const Case& c, std::vector<RankBuffers>& bufs, uint32_t seed)
      : c_(c), bufs_(bufs), rng_(seed), elem_(dtypeSize(c.dtype)) {}

  // Runs the op to the end; failures are reported through gtest (fatal ones stop the run).
  void run() {
    const size_t chunkBytes = c_.count * elem_;
    for (int r = 0; r < c_.p; ++r) pools_.emplace_back(c_.algo->scratchBytes(chunkBytes, c_.p));
    chunks_.resize(c_.p);
    for (int r = 0; r < c_.p; ++r) {
      for (int k = 0; k < c_.chunks; ++k) {
        ChunkSpec spec;
        spec.send = userSend(r) + k * chunkBytes;
        spec.recv = userRecv(r) + k * chunkBytes;
        spec.count = c_.count;
        spec.dtype = c_.dtype;
        spec.op = c_.op;
        spec.rank = r;
        spec.nranks = c_.p;
        spec.hosts = c_.hosts;
        chunks_[r].push_back({c_.algo->make(spec, pools_[r]), false, 0});
        pump(r, k);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    // Each round picks an action kind among those possible, then one action of it: take a ready
    // send, move a matched pair's bytes, or deliver one completion. Completions pile up and come
    // back in random order, so a transfer's sendDone and recvDone are far apart at times.
    while (true) {
      std::vector<std::pair<int, int>> ready;
      for (int r = 0; r < c_.p; ++r)
        for (int k = 0; k < c_.chunks; ++k)
          if (chunks_[r][k].algo && chunks_[r][k].algo->sendReady()) ready.emplace_back(r, k);
      int kinds[3], n = 0;
      if (!ready.empty()) kinds[n++] = 0;
      if (!matchable_.empty()) kinds[n++] = 1;
      if (!pending_.empty()) kinds[n++] = 2;
      if (n == 0) break;
      switch (kinds[pick(n)]) {
        case 0: {
          auto [r, k] = ready[pick(ready.size())];
          postSend(r, k, chunks_[r][k].algo->takeSend());
          break;
        }
        case 1:
          match(takeRandom(matchable_));
          break;
        case 2:
          complete(takeRandom(pending_));
          break;
      }
      if (::testing::Test::HasFatalFailure()) return;
    }
    // Nothing left to do: every chunk must be finished, or the algorithm deadlocked.
    for (int r = 0; r < c_.p; ++r)
      for (int k = 0; k < c_.chunks; ++k)
        ASSERT_TRUE(chunks_[r][k].finished) << "deadlock: rank " << r << " chunk " << k;
    ASSERT_TRUE(posts_.empty()) << posts_.size() << " transfers left posted";
  }

 private:
  using Key = std::tuple<int, int, int, int>;  // chunk, source, destination, step

  struct ChunkState {
    std::unique_ptr<ChunkAlgo> algo;
    bool finished;
    int outstanding;  // posted transfers whose completion was not delivered yet
  };
  struct Post {
    int rank, chunk;
    bool send;
    Transfer t;
    std::vector<unsigned char> data;  // send: the bytes at posting; recv: the bytes delivered
  };
  struct Completion {
    Key key;
    bool send;
  };

  unsigned char* userRecv(int r) { return bufs_[r].recv.data(); }
  unsigned char* userSend(int r) { return c_.inPlace ? userRecv(r) : bufs_[r].send.data(); }
  size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  template <class T>
  T takeRandom(std::vector<T>& v) {
    size_t i = pick(v.size());
    T x = v[i];
    v[i] = v.back();
    v.pop_back();
    return x;
  }

  static bool overlap(const Transfer& a, const Transfer& b) {
    auto pa = static_cast<const unsigned char*>(a.buf),
         pb = static_cast<const unsigned char*>(b.buf);
    return a.bytes && b.bytes && pa < pb + b.bytes && pb < pa + a.bytes;
  }

  // A transfer's buffer lies in this chunk's slice of the user's buffers, or else in a scratch
  // block (which then must be big enough). A receive never targets the user's send buffer.
  void checkBuffer(int r, int k, bool send, const Transfer& t) {
    const size_t chunkBytes = c_.count * elem_;
    auto b = static_cast<const unsigned char*>(t.buf);
    auto inside = [&](const unsigned char* base, size_t len) {
      return b + t.bytes > base && b < base + len;  // touches that buffer at all
    };
    auto within = [&](const unsigned char* base) {
      return b >= base && b + t.bytes <= base + chunkBytes;
    };
    const size_t total = chunkBytes * c_.chunks;
    if (t.bytes == 0) return;
    if (inside(userRecv(r), total)) {
      ASSERT_TRUE(within(userRecv(r) + k * chunkBytes)) << "outside the chunk's recv slice";
    } else if (inside(userSend(r), total)) {
      ASSERT_TRUE(send) << "a receive into the user's send buffer";
      ASSERT_TRUE(within(userSend(r) + k * chunkBytes)) << "outside the chunk's send slice";
    } else {
      ASSERT_LE(t.bytes, pools_[r].blockBytes()) << "scratch transfer larger than a pool block";
    }
  }

  void post(int r, int k, bool send, const Transfer& t) {
    SCOPED_TRACE("rank " + std::to_string(r) + " chunk " + std::to_string(k) +
                 (send ? " send" : " recv") + " step " + std::to_string(t.step) + " peer " +
                 std::to_string(t.peer));
    ASSERT_TRUE(t.peer >= 0 && t.peer < c_.p && t.peer != r);
    ASSERT_TRUE(t.step >= 0 && t.step < c_.algo->steps(c_.p));
    ASSERT_TRUE(t.buf != nullptr || t.bytes == 0);
    checkBuffer(r, k, send, t);
    if (::testing::Test::HasFatalFailure()) return;
    // MPI: nothing that is being received into may be read or written meanwhile, and nothing
    // being sent may be written. Sends may share a buffer with each other.
    for (const auto& [key, other] : posts_) {
      if (other.rank != r || (send && other.send)) continue;
      ASSERT_FALSE(overlap(t, other.t))
          << "overlaps a posted " << (other.send ? "send" : "recv") << " of step " << other.t.step;
    }
    const Key key = send ? Key{k, r, t.peer, t.step} : Key{k, t.peer, r, t.step};
    // The wire tells transfers apart only by this key: a second one would be ambiguous.
    ASSERT_TRUE(used_[send].insert(key).second) << "key used twice";
    Post& p = posts_[std::make_pair(key, send)] = {r, k, send, t, {}};
    auto b = static_cast<unsigned char*>(t.buf);
    if (send) {
      p.data.assign(b, b + t.bytes);
    } else if (t.bytes) {
      std::memset(b, 0xA5, t.bytes);  // a receive buffer's contents are undefined until done
    }
    ++chunks_[r][k].outstanding;
    if (posts_.count(std::make_pair(key, !send)) && !matched_.count(key)) matchable_.push_back(key);
  }

  void postSend(int r, int k, const Transfer& t) { post(r, k, true, t); }

  void match(const Key& key) {
    Post& s = posts_.at(std::make_pair(key, true));
    Post& r = posts_.at(std::make_pair(key, false));
    SCOPED_TRACE("step " + std::to_string(s.t.step) + " " + std::to_string(s.rank) + "->" +
                 std::to_string(r.rank));
    ASSERT_EQ(s.t.bytes, r.t.bytes) << "send and receive sizes differ";
    if (s.t.bytes) {
      ASSERT_EQ(0, std::memcmp(s.t.buf, s.data.data(), s.t.bytes)) << "send buffer written";
      std::memcpy(r.t.buf, s.data.data(), s.t.bytes);
    }
    r.data = s.data;
    matched_.insert(key);
    pending_.push_back({key, true});
    pending_.push_back({key, false});
  }

  void complete(const Completion& done) {
    auto it = posts_.find(std::make_pair(done.key, done.send));
    ASSERT_TRUE(it != posts_.end());
    Post p = std::move(it->second);
    posts_.erase(it);
    SCOPED_TRACE("rank " + std::to_string(p.rank) + " chunk " + std::to_string(p.chunk) +
                 (p.send ? " sendDone " : " recvDone ") + std::to_string(p.t.step));
    // Until its completion a send's buffer stays unwritten, and a receive's keeps what landed.
    if (p.t.bytes) {
      ASSERT_EQ(0, std::memcmp(p.t.buf, p.data.data(), p.t.bytes))
          << (p.send ? "send buffer written before sendDone"
                     : "recv buffer touched before recvDone");
    }
    ChunkState& ch = chunks_[p.rank][p.chunk];
    --ch.outstanding;
    if (p.send) {
      ch.algo->sendDone(p.t.step);
    } else {
      ch.algo->recvDone(p.t.step);
    }
    pump(p.rank, p.chunk);
  }

  // As the engine: post every ready receive, and retire the chunk once finished.
  void pump(int r, int k) {
    ChunkState& ch = chunks_[r][k];
    while (ch.algo->recvReady()) {
      post(r, k, false, ch.algo->takeRecv());
      if (::testing::Test::HasFatalFailure()) return;
    }
    if (ch.algo->finished()) {
      ASSERT_EQ(ch.outstanding, 0) << "finished with transfers outstanding";
      ASSERT_FALSE(ch.algo->sendReady()) << "finished with a send ready";
      ch.algo.reset();
      ch.finished = true;
    }
  }

  const Case& c_;
  std::vector<RankBuffers>& bufs_;
  std::mt19937 rng_;
  size_t elem_;
  std::vector<ScratchPool> pools_;
  std::vector<std::vector<ChunkState>> chunks_;
  std::map<std::pair<Key, bool>, Post> posts_;
  std::set<Key> used_[2];
  std::set<Key> matched_;
  std::vector<Key> matchable_;
  std::vector<Completion> pending_;
};

// ---- Data and reference checks.

uint16_t toHalf(float f) {
  return prioccl::reduce::floatToHalf(f);
}

// Inputs that keep the references meaningful: full-range integers (wrapping is the point);
// floats in [-1, 1), or of magnitude [0.5, 2) for Prod; float16 small integers, whose sums and
// products stay exact.
void fill(std::vector<unsigned char>& v, priocclDataType_t dt, priocclRedOp_t op,
          std::mt19937_64& rng) {
  const size_t n = v.size() / dtypeSize(dt);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  auto real = [&] {
    double x = unit(rng);
    if (op == priocclProd) x = std::copysign(0.5 + 1.5 * std::fabs(x), x);
    return x;
  };
  for (size_t i = 0; i < n; ++i) {
    unsigned char* e = v.data() + i * dtypeSize(dt);
    switch (dt) {
      case priocclInt8:
      case priocclInt32: {
        uint64_t x = rng();
        std::memcpy(e, &x, dtypeSize(dt));
        break;
      }
      case priocclFloat32: {
        float x = static_cast<float>(real());
        std::memcpy(e, &x, 4);
        break;
      }
      case priocclFloat64: {
        double x = real();
        std::memcpy(e, &x, 8);
        break;
      }
      case priocclFloat16: {
        static const float kProd[] = {-2, -1, 1, 2};
        float x = op == priocclProd ? kProd[rng() % 4] : static_cast<float>(int(rng() % 17) - 8);
        uint16_t h = toHalf(x);
        std::memcpy(e, &h, 2);
        break;
      }
      default:
        FAIL() << "no generator for this dtype";
    }
  }
}

template <class T>
T load(const std::vector<unsigned char>& v, size_t i) {
  T x;
  std::memcpy(&x, v.data() + i * sizeof(T), sizeof(T));
  return x;
}

template <class T>
void checkInts(const std::vector<std::vector<unsigned char>>& in,
               const std::vector<unsigned char>& out, priocclRedOp_t op) {
  const int p = static_cast<int>(in.size());
  for (size_t i = 0; i < out.size() / sizeof(T); ++i) {
    uint64_t sum = 0, prod = 1;
    T mn = std::numeric_limits<T>::max(), mx = std::numeric_limits<T>::min();
    for (int r = 0; r < p; ++r) {
      T x = load<T>(in[r], i);
      sum += static_cast<uint64_t>(static_cast<int64_t>(x));
      prod *= static_cast<uint64_t>(static_cast<int64_t>(x));
      mn = std::min(mn, x);
      mx = std::max(mx, x);
    }
    T want = 0;
    switch (op) {
      case priocclSum:
        want = static_cast<T>(sum);
        break;
      case priocclProd:
        want = static_cast<T>(prod);
        break;
      case priocclMin:
        want = mn;
        break;
      case priocclMax:
        want = mx;
        break;
      case priocclAvg:
        want = static_cast<T>(static_cast<T>(sum) / p);
        break;
      case priocclNumOps:
        break;
    }
    ASSERT_EQ(int64_t(load<T>(out, i)), int64_t(want)) << "element " << i;
  }
}

template <class T>
long double valueAt(const std::vector<unsigned char>& v, size_t i) {
  if constexpr (std::is_same<T, uint16_t>::value) {
    return prioccl::reduce::halfToFloat(load<uint16_t>(v, i));
  } else {
    return load<T>(v, i);
  }
}

// T is float, double, or uint16_t for float16 (whose test inputs keep Sum and Prod exact).
template <class T>
void checkFloats(const std::vector<std::vector<unsigned char>>& in,
                 const std::vector<unsigned char>& out, priocclRedOp_t op) {
  const int p = static_cast<int>(in.size());
  const bool half = std::is_same<T, uint16_t>::value;
  const long double eps = half ? std::ldexp(1.0L, -11)
                               : (sizeof(T) == 4 ? std::numeric_limits<float>::epsilon()
                                                 : std::numeric_limits<double>::epsilon());
  for (size_t i = 0; i < out.size() / sizeof(T); ++i) {
    long double sum = 0, abs = 0, prod = 1, mn = INFINITY, mx = -INFINITY;
    for (int r = 0; r < p; ++r) {
      long double x = valueAt<T>(in[r], i);
      sum += x;
      abs += std::fabs(x);
      prod *= x;
      mn = std::min(mn, x);
      mx = std::max(mx, x);
    }
    const long double got = valueAt<T>(out, i);
    switch (op) {
      case priocclSum:
        ASSERT_LE(std::fabs(got - sum), half ? 0 : 2 * p * eps * abs) << "element " << i;
        break;
      case priocclAvg:
        ASSERT_LE(std::fabs(got - sum / p), 2 * eps * std::fabs(sum / p) + 2 * eps * abs)
            << "element " << i;
        break;
      case priocclProd:
        ASSERT_LE(std::fabs(got - prod), half ? 0 : 2 * p * eps * std::fabs(prod))
            << "element " << i;
        break;
      case priocclMin:
        ASSERT_EQ(got, mn) << "element " << i;
        break;
      case priocclMax:
        ASSERT_EQ(got, mx) << "element " << i;
        break;
      case priocclNumOps:
        break;
    }
  }
}

void checkResult(const std::vector<std::vector<unsigned char>>& in,
                 const std::vector<unsigned char>& out, priocclDataType_t dt, priocclRedOp_t op) {
  switch (dt) {
    case priocclInt8:
      return checkInts<int8_t>(in, out, op);
    case priocclInt32:
      return checkInts<int32_t>(in, out, op);
    case priocclFloat16:
      return checkFloats<uint16_t>(in, out, op);
    case priocclFloat32:
      return checkFloats<float>(in, out, op);
    case priocclFloat64:
      return checkFloats<double>(in, out, op);
    default:
      FAIL() << "no reference for this dtype";
  }
}

// Runs one case under several delivery orders: every rank must end with rank 0's bits, those bits
// must not depend on the order, the send buffers must be untouched, and the result must match the
// reference.
void runCase(const Case& c, const std::vector<uint32_t>& seeds) {
  SCOPED_TRACE(describe(c));
  const size_t bytes = c.count * c.chunks * dtypeSize(c.dtype);
  std::mt19937_64 dataRng(std::hash<std::string>()(describe(c)));
  std::vector<std::vector<unsigned char>> inputs(c.p, std::vector<unsigned char>(bytes));
  for (auto& in : inputs) fill(in, c.dtype, c.op, dataRng);
  std::vector<unsigned char> first;
  for (uint32_t seed : seeds) {
    SCOPED_TRACE("schedule seed " + std::to_string(seed));
    std::vector<RankBuffers> bufs(c.p);
    for (int r = 0; r < c.p; ++r) {
      if (c.inPlace) {
        bufs[r].recv = inputs[r];
      } else {
        bufs[r].send = inputs[r];
        bufs[r].recv.assign(bytes, 0x5A);
      }
    }
    Simulator(c, bufs, seed).run();
    if (::testing::Test::HasFatalFailure()) return;
    for (int r = 0; r < c.p; ++r) {
      ASSERT_TRUE(bufs[r].recv == bufs[0].recv) << "rank " << r << " differs from rank 0";
      if (!c.inPlace) {
        ASSERT_TRUE(bufs[r].send == inputs[r]) << "rank " << r << " send written";
      }
    }
    if (first.empty()) {
      first = bufs[0].recv;
      checkResult(inputs, first, c.dtype, c.op);
      if (::testing::Test::HasFatalFailure()) return;
    } else {
      ASSERT_TRUE(bufs[0].recv == first) << "result depends on the delivery order";
    }
  }
}

// ---- The all-reduce cases, one test per algorithm and rank count.

class AlgoTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(AlgoTest, AllReduce) {
  const Algo& a = kAlgos[std::get<0>(GetParam())];
  const int p = std::get<1>(GetParam());
  std::set<size_t> counts = {1, 2, 3, size_t(p + 1), 7, 1000, 4097};
  if (p > 1) counts.insert(p - 1);
  const priocclDataType_t dtypes[] = {priocclFloat32, priocclInt32, priocclInt8, priocclFloat16,
                                      priocclFloat64};
  const priocclRedOp_t ops[] = {priocclSum, priocclProd, priocclMin, priocclMax, priocclAvg};
  // Each count x dtype x op once, half of them in place: which half alternates by count, so each
  // count, dtype and op runs both ways (every combination both ways doubled CI's time).
  size_t countIndex = 0;
  for (size_t count : counts) {
    // Big chunks are where the time goes; small ones are where the corner cases are.
    const std::vector<uint32_t> seeds =
        count > 100 ? std::vector<uint32_t>{1, 2} : std::vector<uint32_t>{1, 2, 3, 4};
    for (size_t d = 0; d < std::size(dtypes); ++d)
      for (size_t o = 0; o < std::size(ops); ++o) {
        const bool inPlace = (d + o + countIndex) % 2 == 1;
        runCase({&a, p, count, 2, dtypes[d], ops[o], inPlace}, seeds);
        if (HasFailure()) return;
      }
    ++countIndex;
  }
}

INSTANTIATE_TEST_SUITE_P(Algos, AlgoTest,
                         ::testing::Combine(::testing::Range(0, int(kAlgos.size())),
                                            ::testing::Range(1, 10)),
                         [](const ::testing::TestParamInfo<AlgoTest::ParamType>& info) {
                           return testName(kAlgos[std::get<0>(info.param)]) + "_p" +
                                  std::to_string(std::get<1>(info.param));
                         });

// A single chunk on its own, many delivery orders: the tightest interleavings of one chunk.
TEST(AlgoSchedules, OneChunkManyOrders) {
  for (const Algo& a : kAlgos)
    for (int p : {2, 3, 5, 8}) {
      std::vector<uint32_t> seeds;
      for (uint32_t s = 1; s <= 50; ++s) seeds.push_back(s);
      for (bool inPlace : {false, true}) {
        runCase({&a, p, 13, 1, priocclFloat32, priocclSum, inPlace}, seeds);
        if (HasFailure()) return;
      }
    }
}

// ---- The hierarchical all-reduce over hosts of every shape: even, uneven (extra ranks gathered
// and scattered), one host (intra-host rings only), interleaved ranks.

prioccl::HostLayout layoutOf(const std::vector<int>& hostOfRank) {
  std::vector<std::string> keys;
  for (int h : hostOfRank) keys.push_back("h" + std::to_string(h));
  return prioccl::HostLayout::fromKeys(keys);
}

TEST(Hierarchical, EveryHostShape) {
  const Algo* hier = prioccl::findAlgo("hier");
  ASSERT_NE(hier, nullptr);
  const std::vector<std::vector<int>> shapes = {
      {0, 0, 1, 1},           // 2 x 2
      {0, 0, 0, 1, 1},        // 3 + 2
      {0, 0, 0, 0},           // 1 x 4
      {0, 0, 1},              // 2 + 1: one shard, one extra rank
      {0, 1, 1, 1},           // 1 + 3
      {0, 0, 0, 1, 1, 1},     // 2 x 3
      {0, 0, 1, 1, 2, 2},     // 3 x 2
      {0, 0, 1, 1, 2},        // 2 + 2 + 1
      {0, 1, 0, 1},           // interleaved
      {0, 0, 0, 0, 1, 2, 2},  // 4 + 1 + 2: a partner with several extras
      {0, 0, 0, 0, 0, 1, 1},  // 5 + 2: two extras per partner
  };
  const priocclDataType_t dtypes[] = {priocclFloat32, priocclInt32, priocclInt8, priocclFloat16,
                                      priocclFloat64};
  const priocclRedOp_t ops[] = {priocclSum, priocclProd, priocclMin, priocclMax, priocclAvg};
  for (const std::vector<int>& shape : shapes) {
    prioccl::HostLayout layout = layoutOf(shape);
    const int p = layout.nranks();
    // The step bound the tag layout reserves (HierarchicalChunk::steps) holds for this shape.
    EXPECT_LE(2 * (layout.mostPerHost() + layout.hosts() - 2), hier->steps(p)) << layout.describe();
    for (size_t count : {size_t(1), size_t(3), size_t(p + 1), size_t(1000)})
      for (priocclDataType_t dt : dtypes)
        for (priocclRedOp_t op : ops)
          for (bool inPlace : {false, true}) {
            Case c{hier, p, count, 2, dt, op, inPlace, &layout};
            runCase(c, count > 100 ? std::vector<uint32_t>{1, 2} : std::vector<uint32_t>{1, 2, 3});
            if (HasFailure()) return;
          }
  }
}

// Two-level results equal the flat ring's bit for bit where the reduction order cannot matter:
// integers, min/max, and float sums of small integers (exact in any order).
TEST(Hierarchical, SameBitsAsTheRing) {
  const Algo* hier = prioccl::findAlgo("hier");
  const Algo* ring = prioccl::findAlgo("ring");
  for (const std::vector<int>& shape :
       std::vector<std::vector<int>>{{0, 0, 1, 1}, {0, 0, 0, 1, 1}, {0, 0, 0, 0}}) {
    prioccl::HostLayout layout = layoutOf(shape);
    const int p = layout.nranks();
    for (priocclDataType_t dt : {priocclInt32, priocclInt8, priocclFloat16})
      for (priocclRedOp_t op : {priocclSum, priocclMin, priocclMax, priocclAvg}) {
        const size_t count = 999, bytes = count * 2 * dtypeSize(dt);
        std::mt19937_64 rng(7);
        std::vector<std::vector<unsigned char>> inputs(p, std::vector<unsigned char>(bytes));
        for (auto& in : inputs) fill(in, dt, op, rng);
        std::vector<unsigned char> results[2];
        for (int which = 0; which < 2; ++which) {
          std::vector<RankBuffers> bufs(p);
          for (int r = 0; r < p; ++r) {
            bufs[r].send = inputs[r];
            bufs[r].recv.assign(bytes, 0);
          }
          Case c{which ? hier : ring, p, count, 2, dt, op, false, which ? &layout : nullptr};
          SCOPED_TRACE(describe(c));
          Simulator(c, bufs, 5).run();
          ASSERT_FALSE(HasFatalFailure());
          results[which] = bufs[0].recv;
        }
        EXPECT_TRUE(results[0] == results[1])
            << layout.describe() << " " << prioccl::reduce::dtypeName(dt) << " "
            << prioccl::reduce::opName(op);
      }
  }
}

TEST(HostLayout, FromKeysAndDescribe) {
  prioccl::HostLayout l = prioccl::HostLayout::fromKeys({"b", "a", "b", "a", "b"});
  EXPECT_EQ(l.hosts(), 2);
  EXPECT_EQ(l.members[0], (std::vector<int>{0, 2, 4}));  // hosts in order of their lowest rank
  EXPECT_EQ(l.members[1], (std::vector<int>{1, 3}));
  EXPECT_EQ(l.localIndex, (std::vector<int>{0, 0, 1, 1, 2}));
  EXPECT_EQ(l.hostOf, (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(l.fewestPerHost(), 2);
  EXPECT_EQ(l.mostPerHost(), 3);
  EXPECT_TRUE(l.twoLevel());
  EXPECT_EQ(l.describe(), "2 hosts (3+2 ranks)");
  EXPECT_EQ(layoutOf({0, 0, 1, 1}).describe(), "2 hosts x 2 ranks");
  EXPECT_FALSE(layoutOf({0, 0, 0}).twoLevel());     // one host
  EXPECT_FALSE(layoutOf({0, 1, 2, 3}).twoLevel());  // one rank per host
  EXPECT_EQ(layoutOf({0, 1, 2}).describe(), "3 hosts x 1 rank");
}

// ---- The double binary tree's shape.

// The shape's properties for every rank count up to 1024: in each tree one root, everyone else
// reaches it by parent links (acyclic and spanning), children and parents agree (child slot
// included), child[1] only with child[0], depth at most floor(log2 p) links; and no rank is
// interior in both trees.
TEST(DoubleBinaryTree, Shape) {
  for (int p = 1; p <= 1024; ++p) {
    SCOPED_TRACE("p=" + std::to_string(p));
    int depthBound = 0;
    while ((2 << depthBound) <= p) ++depthBound;  // floor(log2 p)
    std::vector<int> interior(p, 0);
    for (int t = 0; t < 2; ++t) {
      std::vector<TreeLinks> l(p);
      for (int r = 0; r < p; ++r) l[r] = prioccl::treeLinks(p, r, t);
      int roots = 0;
      for (int r = 0; r < p; ++r) {
        const TreeLinks& x = l[r];
        if (x.parent < 0) {
          ++roots;
          ASSERT_EQ(x.slot, -1);
        } else {
          ASSERT_TRUE(x.parent < p && x.parent != r);
          ASSERT_TRUE(x.slot == 0 || x.slot == 1);
          ASSERT_EQ(l[x.parent].child[x.slot], r) << "tree " << t << " rank " << r;
        }
        ASSERT_TRUE(x.child[1] < 0 || x.child[0] >= 0);
        for (int s = 0; s < 2; ++s) {
          const int c = x.child[s];
          if (c < 0) continue;
          ASSERT_LT(c, p);
          ASSERT_EQ(l[c].parent, r) << "tree " << t << " rank " << r;
          ASSERT_EQ(l[c].slot, s);
        }
        if (x.child[0] >= 0) ++interior[r];
        int depth = 0;
        for (int a = r; l[a].parent >= 0; a = l[a].parent)
          ASSERT_LE(++depth, depthBound) << "tree " << t << " rank " << r << " too deep or a cycle";
      }
      ASSERT_EQ(roots, 1) << "tree " << t;
    }
    for (int r = 0; r < p; ++r) ASSERT_LE(interior[r], 1) << "rank " << r << " interior twice";
  }
}

TEST(DoubleBinaryTree, SmallShapes) {
  // p = 2: each rank is the other's root.
  EXPECT_EQ(prioccl::treeLinks(2, 1, 0).child[0], 0);
  EXPECT_EQ(prioccl::treeLinks(2, 0, 1).child[0], 1);
  // p = 5, tree 0: 3 is the root over 1 (children 0, 2) and 4.
  TreeLinks root = prioccl::treeLinks(5, 3, 0);
  EXPECT_EQ(root.parent, -1);
  EXPECT_EQ(root.child[0], 1);
  EXPECT_EQ(root.child[1], 4);
  TreeLinks one = prioccl::treeLinks(5, 1, 0);
  EXPECT_EQ(one.child[0], 0);
  EXPECT_EQ(one.child[1], 2);
  // ... and tree 1 is that shape shifted by one: 4 over 2 (children 1, 3) and 0.
  root = prioccl::treeLinks(5, 4, 1);
  EXPECT_EQ(root.child[0], 2);
  EXPECT_EQ(root.child[1], 0);
}

}  // namespace

// The pool recycles blocks but keeps no more free ones than its limit: a burst's blocks beyond it
// go back to the system, so a long job's scratch does not grow to its highest burst for good.
TEST(ScratchPool, KeepsAtMostItsLimitOfFreeBlocks) {
  ScratchPool pool(1 << 20);
  const size_t limit = pool.retainedLimit();
  EXPECT_EQ(limit, ScratchPool::kRetainBytes >> 20);
  std::vector<ScratchPool::Block> burst;
  for (size_t i = 0; i < 3 * limit; ++i) {
    burst.push_back(pool.take());
    burst.back()[(1 << 20) - 1] = 1;  // the whole block is writable
  }
  EXPECT_EQ(pool.freeBlocks(), 0u);
  std::set<unsigned char*> kept;  // the first `limit` given back are kept
  for (size_t i = 0; i < limit; ++i) kept.insert(burst[i].get());
  for (ScratchPool::Block& b : burst) pool.give(std::move(b));
  EXPECT_EQ(pool.freeBlocks(), limit);
  ScratchPool::Block again = pool.take();  // recycled, not a new mapping
  EXPECT_EQ(kept.count(again.get()), 1u);
  EXPECT_EQ(pool.freeBlocks(), limit - 1);
}
