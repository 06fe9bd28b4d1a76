// PRIOCCL_* environment parsing: sizes with suffixes, clear errors for malformed values.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <utility>
#include <vector>

#include "algo/registry.h"
#include "algo/select.h"
#include "prioccl/prioccl.hpp"

namespace {

struct EnvVar {
  const char* name;
  EnvVar(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvVar() { unsetenv(name); }
};

TEST(Config, DefaultsWithoutEnvironment) {
  prioccl::Config c = prioccl::Config::fromEnv();
  EXPECT_EQ(c.chunkBytes, prioccl::Config().chunkBytes);
  EXPECT_EQ(c.creditBytes, prioccl::Config().creditBytes);
  EXPECT_TRUE(c.requireThreadMultiple);
}

TEST(Config, SizesAndSuffixes) {
  EnvVar a("PRIOCCL_CHUNK_BYTES", "256k");
  EnvVar b("PRIOCCL_CREDIT_BYTES", "8MiB");
  EnvVar w("PRIOCCL_WINDOW_CHUNKS", "64");
  EnvVar t("PRIOCCL_MPI_THREAD_CHECK", "0");
  prioccl::Config c = prioccl::Config::fromEnv();
  EXPECT_EQ(c.chunkBytes, 256u * 1024);
  EXPECT_EQ(c.creditBytes, 8u << 20);
  EXPECT_EQ(c.windowChunks, 64u);
  EXPECT_FALSE(c.requireThreadMultiple);
  EXPECT_NE(c.describe().find("chunkBytes=262144"), std::string::npos);
}

TEST(Config, MalformedValuesAreErrorsNamingTheVariable) {
  for (const char* bad : {"abc", "-5", "12q", "4MX", "2G0", "99999999999999999999"}) {
    EnvVar a("PRIOCCL_CHUNK_BYTES", bad);
    try {
      prioccl::Config::fromEnv();
      ADD_FAILURE() << "accepted PRIOCCL_CHUNK_BYTES=" << bad;
    } catch (const prioccl::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("PRIOCCL_CHUNK_BYTES"), std::string::npos) << e.what();
      EXPECT_EQ(e.code(), priocclInvalidArgument);
    }
  }
  EnvVar t("PRIOCCL_MPI_THREAD_CHECK", "maybe");
  EXPECT_THROW(prioccl::Config::fromEnv(), prioccl::InvalidArgument);
}

TEST(Config, AutoTuningFollowsTheMeasuredLink) {
  EnvVar a("PRIOCCL_CHUNK_BYTES", "auto");
  prioccl::Config c = prioccl::Config::fromEnv();
  EXPECT_EQ(c.chunkBytes, 0u);
  prioccl::Config slow = c, fast = c, fixed = c;
  slow.resolveAuto(117e6, 100e-6, 4);  // a 1 Gbit/s link: segments of ~30 KB
  EXPECT_EQ(slow.chunkBytes, 128u << 10);
  EXPECT_EQ(slow.creditBytes, 64u << 10);  // ~0.5 ms of the link
  fast.resolveAuto(3e9, 5e-6, 4);          // shared memory: capped chunks, two segments of credit
  EXPECT_EQ(fast.chunkBytes, 1u << 20);
  EXPECT_EQ(fast.creditBytes, 512u << 10);
  fixed.chunkBytes = 4096;  // explicit values are kept
  fixed.resolveAuto(3e9, 5e-6, 4);
  EXPECT_EQ(fixed.chunkBytes, 4096u);
  EXPECT_GE(fixed.creditBytes, fixed.chunkBytes);
  // The same 1 Gbit/s link measured low still gets 128 KiB chunks (rounded up), and the credit
  // covers two ring segments of whatever chunk is in force.
  prioccl::Config noisy = c, big = c;
  noisy.resolveAuto(94e6, 100e-6, 4);
  EXPECT_EQ(noisy.chunkBytes, 128u << 10);
  EXPECT_EQ(noisy.creditBytes, 64u << 10);
  big.chunkBytes = 1 << 20;
  big.resolveAuto(117e6, 100e-6, 4);
  EXPECT_EQ(big.creditBytes, 512u << 10);
}

// 0.5 ms of a fast link would queue megabytes in front of every urgent step: the credit's
// link-time part stops at 512 KiB (above ~10 Gbit/s), while two ring segments still count in
// full and the tuner may still grow it to its maximum.
TEST(Config, AutoCreditStartsBelowAFastLinksHalfMillisecond) {
  const prioccl::Config c;  // the defaults (auto), whatever PRIOCCL_* the test runs under
  for (double gbit : {10.0, 100.0, 400.0}) {  // 10: 0.5 ms rounds to the bound itself
    prioccl::Config fast = c;
    fast.resolveAuto(gbit * 1e9 / 8, 5e-6, 4);
    EXPECT_EQ(fast.creditBytes, 512u << 10) << gbit << " Gbit/s";
    EXPECT_EQ(fast.creditMaxBytes, 16u << 20) << gbit << " Gbit/s";
  }
  prioccl::Config bigChunks = c;
  bigChunks.chunkBytes = 8 << 20;
  bigChunks.resolveAuto(100e9 / 8, 5e-6, 4);
  EXPECT_EQ(bigChunks.creditBytes, 4u << 20) << "two 2 MiB ring segments";
}

// Beyond 16 ranks (32 on slow links) the 1 MiB cap would cut a ring's steps below 64 KiB (32 KiB
// on slow links): the chunk grows with the rank count instead, and stays as it was below that.
TEST(Config, AutoChunkKeepsRingStepsLongAtManyRanks) {
  const std::vector<std::pair<int, size_t>> fast{
      {2, 512u << 10}, {4, 1u << 20},    {8, 1u << 20},     {16, 1u << 20},   {32, 2u << 20},
      {64, 4u << 20},  {256, 16u << 20}, {1024, 64u << 20}, {1000, 64u << 20}};
  for (auto [ranks, chunk] : fast) {
    prioccl::Config c;
    c.resolveAuto(12.5e9, 5e-6, ranks);  // 100 Gbit/s
    EXPECT_EQ(c.chunkBytes, chunk) << ranks << " ranks";
  }
  const std::vector<std::pair<int, size_t>> slow{
      {4, 128u << 10}, {8, 256u << 10}, {32, 1u << 20}, {64, 2u << 20}, {1024, 32u << 20}};
  for (auto [ranks, chunk] : slow) {
    prioccl::Config c;
    c.resolveAuto(117e6, 100e-6, ranks);  // 1 Gbit/s
    EXPECT_EQ(c.chunkBytes, chunk) << ranks << " ranks";
  }
}

// The chunk size decides the order of every sum, so it must not follow run-to-run noise in the
// link measurement: one value for every measurement of a network up to ~5 Gbit/s, another for
// faster links and shared memory.
TEST(Config, AutoChunkIsTheSameForEveryMeasurementOfALinkClass) {
  for (double bw : {5e6, 12.5e6, 30e6, 37.5e6, 60e6, 94e6, 125e6, 250e6, 375e6, 599e6}) {
    prioccl::Config c;
    c.resolveAuto(bw, 100e-6, 4);
    EXPECT_EQ(c.chunkBytes, 128u << 10) << bw << " B/s";
    EXPECT_TRUE(c.slowLinks) << bw << " B/s";
  }
  for (double bw : {600e6, 1.25e9, 3e9, 12e9}) {
    prioccl::Config c;
    c.resolveAuto(bw, 5e-6, 4);
    EXPECT_EQ(c.chunkBytes, 1u << 20) << bw << " B/s";
    EXPECT_FALSE(c.slowLinks) << bw << " B/s";
  }
  prioccl::Config oneHost;
  oneHost.resolveAuto(100e6, 100e-6, 4, /*oneHost=*/true);  // a busy host's shared memory
  EXPECT_EQ(oneHost.chunkBytes, 1u << 20);
  EXPECT_FALSE(oneHost.slowLinks);
  prioccl::Config unmeasured;  // one rank
  unmeasured.resolveAuto(0, 0, 1);
  EXPECT_FALSE(unmeasured.slowLinks);
  prioccl::Config two, eight;
  two.resolveAuto(117e6, 100e-6, 2);
  eight.resolveAuto(117e6, 100e-6, 8);
  EXPECT_EQ(two.chunkBytes, 64u << 10) << "32 KiB segments, at least 64 KiB";
  EXPECT_EQ(eight.chunkBytes, 256u << 10);
}

// The capped tcp send buffer is opt-in: off unless asked for, never derived from the link.
TEST(Config, SocketSendBufferIsOffUnlessSet) {
  prioccl::Config c = prioccl::Config::fromEnv();
  c.resolveAuto(375e6, 60e-6, 4);
  EXPECT_EQ(c.socketSndbuf, 0u);
  EnvVar e("PRIOCCL_SOCKET_SNDBUF", "16K");
  prioccl::Config set = prioccl::Config::fromEnv();
  set.resolveAuto(375e6, 60e-6, 4);
  EXPECT_EQ(set.socketSndbuf, 16u << 10);
  EnvVar bad("PRIOCCL_SOCKET_SNDBUF", "2T");
  EXPECT_THROW(prioccl::Config::fromEnv(), prioccl::InvalidArgument) << "above 1 GiB";
}

TEST(Config, CreditMayGrowOnlyWhenItIsAutomatic) {
  prioccl::Config a;
  a.resolveAuto(117e6, 100e-6, 4);  // 1 Gbit/s: ~16 ms of the link
  EXPECT_EQ(a.creditMaxBytes, 2u << 20);
  prioccl::Config shm;
  shm.resolveAuto(3e9, 5e-6, 4);
  EXPECT_EQ(shm.creditMaxBytes, 16u << 20) << "capped";
  prioccl::Config slow;
  slow.resolveAuto(1e6, 1e-3, 4);
  EXPECT_EQ(slow.creditMaxBytes, slow.creditBytes) << "never below the starting credit";
  prioccl::Config pinned;
  pinned.creditBytes = 100000;
  pinned.resolveAuto(117e6, 100e-6, 4);
  EXPECT_EQ(pinned.creditMaxBytes, 100000u) << "an explicit credit stays fixed";
  prioccl::Config both;
  both.creditBytes = 100000;
  both.creditMaxBytes = 50000;
  both.resolveAuto(117e6, 100e-6, 4);
  EXPECT_EQ(both.creditMaxBytes, 100000u) << "a maximum below the credit is the credit";
  EnvVar m("PRIOCCL_CREDIT_MAX_BYTES", "4M");
  EXPECT_EQ(prioccl::Config::fromEnv().creditMaxBytes, 4u << 20);
}

TEST(Config, ChunkAboveOneGiBRejected) {
  EnvVar a("PRIOCCL_CHUNK_BYTES", "2G");
  EXPECT_THROW(prioccl::Config::fromEnv(), prioccl::InvalidArgument);
}

// Two hosts of `ranksPerHost` ranks each, as the layout tells the selector.
prioccl::HostLevels twoHosts(int ranksPerHost) {
  prioccl::HostLevels levels;
  levels.hosts = 2;
  levels.shards = levels.most = ranksPerHost;
  return levels;
}

}  // namespace

TEST(Config, AlgorithmByNameAndBySizeRules) {
  {
    EnvVar a("PRIOCCL_ALGO", "tree");
    prioccl::Config c = prioccl::Config::fromEnv();
    EXPECT_EQ(c.algorithm, priocclAlgoTree);
    EXPECT_TRUE(c.algorithmRules.empty());
  }
  EnvVar a("PRIOCCL_ALGO", "rd<64K,auto<1M,ring");
  prioccl::Config c = prioccl::Config::fromEnv();
  EXPECT_EQ(c.algorithmRules, "rd<64K,auto<1M,ring");
  EXPECT_NE(c.describe().find("algorithm=rd<64K,auto<1M,ring"), std::string::npos);

  // Rules override the forced algorithm; an "auto" term falls to the model (here uncalibrated:
  // the fixed rule, rd below 32 KiB, hd up to 64 KiB, ring above).
  prioccl::AlgoSelector s(priocclAlgoTree);
  s.setPolicy(priocclAlgoTree, prioccl::parseAlgorithmRules("test", c.algorithmRules));
  EXPECT_TRUE(s.usesModel());
  EXPECT_EQ(s.choose(0), priocclAlgoRecursiveDoubling);
  EXPECT_EQ(s.choose((64 << 10) - 1), priocclAlgoRecursiveDoubling);
  EXPECT_EQ(s.choose(64 << 10), priocclAlgoHalvingDoubling);  // auto term: the fixed rule's hd
  EXPECT_EQ(s.choose((64 << 10) + 1), priocclAlgoRing);       // ... and its ring
  EXPECT_EQ(s.choose(1 << 20), priocclAlgoRing);              // last term
  s.setPolicy(priocclAlgoAuto, prioccl::parseAlgorithmRules("test", "tree<1K,rd"));
  EXPECT_FALSE(s.usesModel());
  EXPECT_EQ(s.choose(1000), priocclAlgoTree);
  EXPECT_EQ(s.choose(1 << 30), priocclAlgoRecursiveDoubling);
  EXPECT_TRUE(prioccl::parseAlgorithmRules("test", "").empty());
}

// The default: no timing, so every run chooses alike; two levels of links (a layout fact) add the
// hierarchical all-reduce for large ops.
TEST(Config, UncalibratedAutoIsAFixedRuleBySizeAndLayout) {
  EXPECT_FALSE(prioccl::Config().calibrate);
  prioccl::AlgoSelector s;
  EXPECT_EQ(s.choose(8), priocclAlgoRecursiveDoubling);
  EXPECT_EQ(s.choose((32 << 10) - 4), priocclAlgoRecursiveDoubling);
  EXPECT_EQ(s.choose(32 << 10), priocclAlgoHalvingDoubling);
  EXPECT_EQ(s.choose(64 << 10), priocclAlgoHalvingDoubling);
  EXPECT_EQ(s.choose((64 << 10) + 4), priocclAlgoRing);
  EXPECT_EQ(s.choose(1 << 30), priocclAlgoRing);
  s.setLevels(twoHosts(2));
  EXPECT_EQ(s.choose(128 << 10), priocclAlgoRing);
  EXPECT_EQ(s.choose(256 << 10), priocclAlgoHierarchical);
  EXPECT_EQ(s.choose(1 << 30), priocclAlgoHierarchical);
  EXPECT_EQ(s.choose(8), priocclAlgoRecursiveDoubling);
  EXPECT_NE(s.describe().find("hier from 256 KiB"), std::string::npos) << s.describe();
}

// Halving-doubling reaches further with more ranks (up to 64 KiB x p, where p is a power of
// two: a ring step of 64 KiB), and no further where p is not one.
TEST(Config, UncalibratedHalvingDoublingScalesWithPowerOfTwoRanks) {
  prioccl::AlgoSelector s;
  s.setLink(0, 8);
  EXPECT_EQ(s.choose((32 << 10) - 4), priocclAlgoRecursiveDoubling);
  EXPECT_EQ(s.choose(128 << 10), priocclAlgoHalvingDoubling);
  EXPECT_EQ(s.choose(512 << 10), priocclAlgoHalvingDoubling);
  EXPECT_EQ(s.choose((512 << 10) + 4), priocclAlgoRing);
  EXPECT_NE(s.describe().find("hd up to 512 KiB (64 KiB x 8 ranks)"), std::string::npos)
      << s.describe();
  s.setLink(0, 1024);
  EXPECT_EQ(s.choose(64 << 20), priocclAlgoHalvingDoubling);
  EXPECT_EQ(s.choose((64 << 20) + 4), priocclAlgoRing);
  for (int p : {2, 6, 96}) {  // 2: up to 128 KiB; 6 and 96, not powers of two: 64 KiB
    s.setLink(0, p);
    EXPECT_EQ(s.choose(64 << 10), priocclAlgoHalvingDoubling) << p;
    EXPECT_EQ(s.choose((64 << 10) + 4), p == 2 ? priocclAlgoHalvingDoubling : priocclAlgoRing) << p;
    EXPECT_EQ(s.choose(1 << 20), priocclAlgoRing) << p;
  }
  s.setLink(0, 8);  // two levels: the hierarchical all-reduce still from 256 KiB
  s.setLevels(twoHosts(4));
  EXPECT_EQ(s.choose(128 << 10), priocclAlgoHalvingDoubling);
  EXPECT_EQ(s.choose(256 << 10), priocclAlgoHierarchical);
}

TEST(Config, MalformedAlgorithmRulesAreErrors) {
  for (const char* bad : {"rd<64K", "rd<64K,", "rd,tree", "bogus<1K,ring", "rd<1M,tree<64K,ring",
                          "rd<,ring", "rd<64Q,ring", ",ring", "rd<64K,ring<"}) {
    EnvVar a("PRIOCCL_ALGO", bad);
    try {
      prioccl::Config::fromEnv();
      ADD_FAILURE() << "accepted PRIOCCL_ALGO=" << bad;
    } catch (const prioccl::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("PRIOCCL_ALGO"), std::string::npos) << e.what();
    }
  }
}

TEST(Config, TransportFromEnvironment) {
  EXPECT_EQ(prioccl::Config::fromEnv().transport, priocclTransportAuto);
  {
    EnvVar t("PRIOCCL_TRANSPORT", "UCX");
    EXPECT_EQ(prioccl::Config::fromEnv().transport, priocclTransportUcx);
  }
  EnvVar t("PRIOCCL_TRANSPORT", "verbs");
  EXPECT_THROW(prioccl::Config::fromEnv(), prioccl::InvalidArgument);
}

TEST(Config, CostModelNeverBeatsTheSustainedLink) {
  using prioccl::AlgoSelector;
  auto sendFactor = [](priocclAlgorithm_t a, int nranks) {
    return prioccl::algoEntry(a).sendFactor(nranks);
  };
  EXPECT_EQ(sendFactor(priocclAlgoRecursiveDoubling, 1), 0);
  EXPECT_EQ(sendFactor(priocclAlgoRecursiveDoubling, 4), 2);
  EXPECT_EQ(sendFactor(priocclAlgoHalvingDoubling, 4), 1.5);
  EXPECT_EQ(sendFactor(priocclAlgoRing, 4), 1.5);
  EXPECT_EQ(sendFactor(priocclAlgoRecursiveDoubling, 5), 3);  // + the hand-back
  EXPECT_EQ(sendFactor(priocclAlgoHalvingDoubling, 5), 2.5);
  EXPECT_EQ(sendFactor(priocclAlgoRing, 5), 1.6);
  EXPECT_EQ(sendFactor(priocclAlgoTree, 5), 2);
  EXPECT_EQ(sendFactor(priocclAlgoTree, 3), 4.0 / 3);  // below 4 ranks the tree moves as a ring
  // Single ops timed through a burst allowance: recursive doubling looks fastest at 32 KiB.
  AlgoSelector s;
  std::vector<size_t> sizes = {8, 32 << 10, 512 << 10};
  std::vector<std::vector<double>> t(prioccl::algoRegistry().size());
  t[0] = {500e-6, 700e-6, 7e-3};   // ring
  t[1] = {300e-6, 600e-6, 10e-3};  // tree
  t[2] = {100e-6, 250e-6, 15e-3};  // rd
  t[3] = {300e-6, 340e-6, 8e-3};   // hd
  s.calibrate(sizes, t);
  EXPECT_EQ(s.choose(32 << 10), priocclAlgoRecursiveDoubling);
  // At 125 MB/s sustained, 4 ranks: rd sends 64 KiB per op (524 us), hd 48 KiB (393 us).
  s.setLink(125e6, 4);
  EXPECT_EQ(s.choose(32 << 10), priocclAlgoHalvingDoubling);
  EXPECT_NEAR(s.modelSeconds(priocclAlgoRecursiveDoubling, 32 << 10), 2 * 32768 / 125e6, 1e-9);
  EXPECT_EQ(s.choose(8), priocclAlgoRecursiveDoubling);  // latency-bound: the floor is far below
  EXPECT_NE(s.describe().find("sustained link 125 MB/s"), std::string::npos) << s.describe();
  // An algorithm without measurements (a registry row the calibration did not time) is never
  // chosen.
  t[2].clear();
  AlgoSelector partial;
  partial.calibrate(sizes, t);
  EXPECT_LT(partial.modelSeconds(priocclAlgoRecursiveDoubling, 8), 0);
  for (size_t bytes : {size_t{8}, size_t{32} << 10, size_t{1} << 20})
    EXPECT_NE(partial.choose(bytes), priocclAlgoRecursiveDoubling) << bytes;
}
