// The simulator (perf/sim) runs prioccl's own engines over a simulated fabric. Its predictions
// are checked here against figures computed by hand, where the network model makes them exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "reduce/reduce.h"
#include "simulation.h"

namespace {

using prioccl::sim::allReduceOp;
using prioccl::sim::RankBuffers;
using prioccl::sim::SimOptions;
using prioccl::sim::Simulation;

// Every rank all-reduces `bytes` holding rank + 1, all at time 0. Checks that every rank ends
// with 1 + 2 + ... + p exactly (the library's own reduction ran); returns each rank's time and
// the chunk size the engines used.
struct RanksRun {
  std::vector<double> times;
  size_t chunk;
  double cpuSeconds;  // what the model charged all ranks
};
RanksRun allReduceOfRanks(int ranks, const SimOptions& o, size_t bytes) {
  Simulation sim(ranks, o);
  const size_t count = bytes / sizeof(float);
  std::vector<std::vector<float>> data(ranks);
  std::vector<size_t> ops;
  for (int r = 0; r < ranks; ++r) {
    data[r].assign(count, static_cast<float>(r + 1));
    ops.push_back(sim.submit(r, 0, allReduceOp(data[r].data(), count, 0)));
  }
  sim.run();
  RanksRun run{{}, sim.config().chunkBytes, sim.fabric().cpuSeconds()};
  const float sum = static_cast<float>(ranks * (ranks + 1) / 2);
  for (int r = 0; r < ranks; ++r) {
    run.times.push_back(sim.endedAt(ops[r]) - sim.submittedAt(ops[r]));
    EXPECT_EQ(data[r].front(), sum) << "rank " << r;
    EXPECT_EQ(data[r].back(), sum) << "rank " << r;
  }
  return run;
}

// Links of `bitsPerSecond` without latency, and ranks without CPU cost per message: the wire
// alone sets the times, so they can be computed by hand.
SimOptions wireOnly(double bitsPerSecond) {
  SimOptions o;
  o.fabric.bitsPerSecond = bitsPerSecond;
  o.fabric.latencySeconds = 0;
  o.fabric.cpuPerMessageSeconds = 0;
  return o;
}

// The slowest rank's time.
double slowestOf(const RanksRun& run) {
  return *std::max_element(run.times.begin(), run.times.end());
}

// 16 ranks, one ring all-reduce of one chunk, links with no latency and ranks with no CPU cost:
// the ring's 2 (p - 1) steps each move chunk / p bytes over every NIC at once, one step after
// the other, so the op takes 2 (p - 1) * (chunk / p) / rate. The op's agreement (a few bytes)
// adds nanoseconds.
TEST(Sim, RingAllReduceOfOneChunkTakesItsStepsOnTheWire) {
  constexpr int kRanks = 16;
  constexpr size_t kChunk = size_t{1} << 20;  // resolveAuto's for a 10 Gbit/s link and 16 ranks
  SimOptions o = wireOnly(10e9);
  o.algorithm = priocclAlgoRing;
  const RanksRun run = allReduceOfRanks(kRanks, o, kChunk);
  ASSERT_EQ(run.chunk, kChunk);
  const double hand = 2.0 * (kRanks - 1) * (static_cast<double>(kChunk) / kRanks) / (10e9 / 8);
  for (int r = 0; r < kRanks; ++r) EXPECT_NEAR(run.times[r], hand, hand * 0.01) << "rank " << r;
}

// 2 hosts of 2 ranks, 1 MiB, NICs of 1 Gbit/s without latency or CPU cost, memory much faster.
// The ring crosses each host's NIC with 2 (p - 1) / p of the op, 1.5 MiB; the hierarchical
// all-reduce's shards cross it with 2 (h - 1) / h of their half each, two shards per NIC: 1 MiB.
// The memory's copies (chunk by chunk, overlapping the NIC's) add about 1%.
double hostsTime(priocclAlgorithm_t algorithm) {
  SimOptions o = wireOnly(1e9);
  o.fabric.ranksPerHost = 2;
  o.fabric.intraBitsPerSecond = 100e9;
  o.fabric.intraLatencySeconds = 0;
  o.algorithm = algorithm;
  return slowestOf(allReduceOfRanks(4, o, 1 << 20));
}

TEST(Sim, HostsShareTheirNicAndTheHierarchicalAllReduceCrossesItLess) {
  const double mib = 1 << 20, nic = 1e9 / 8;
  EXPECT_NEAR(hostsTime(priocclAlgoRing), 1.5 * mib / nic, 0.02 * 1.5 * mib / nic);
  EXPECT_NEAR(hostsTime(priocclAlgoHierarchical), mib / nic, 0.02 * mib / nic);
}

// priority_perf's pattern at 4 ranks and 1 Gbit/s: an urgent 1 MiB all-reduce arrives while an
// 8 MiB one is on the wire. The scheduler (the library's, not a model of it) lets it overtake:
// it takes little longer than alone, where the FIFO schedule makes it wait for the bulk op. A
// scheduler whose ordering rule is broken fails this.
double urgentTime(priocclSchedule_t schedule, bool withBulk) {
  constexpr int kRanks = 4;
  SimOptions o;
  o.fabric.bitsPerSecond = 1e9;
  o.config.schedule = schedule;
  Simulation sim(kRanks, o);
  RankBuffers bulk(kRanks, (8 << 20) / 4, true), urgent(kRanks, (1 << 20) / 4, true);
  std::vector<size_t> ops;
  for (int r = 0; r < kRanks; ++r) {
    if (withBulk) sim.submit(r, 0, allReduceOp(bulk.of(r), bulk.count(), 100));
    ops.push_back(sim.submit(r, withBulk ? 0.02 : 0, allReduceOp(urgent.of(r), urgent.count(), 0)));
  }
  sim.run();
  return sim.slowest(ops);
}

TEST(Sim, UrgentOpOvertakesBulkUnderThePriorityScheduleOnly) {
  const double alone = urgentTime(priocclSchedulePriority, false);
  const double priority = urgentTime(priocclSchedulePriority, true);
  const double fifo = urgentTime(priocclScheduleFifo, true);
  // Alone: the ring's 2 (p - 1) / p of 1 MiB at 125 MB/s, plus latencies and CPU.
  EXPECT_NEAR(alone, 1.5 * (1 << 20) / 125e6, 0.1 * alone);
  EXPECT_LT(priority, 1.5 * alone);
  // FIFO: behind what is left of the bulk op (about 100 ms of wire, 20 ms of it gone).
  EXPECT_GT(fifo, 4 * alone);
}

// Without payload (messages carry their heads, reductions are skipped, the ranks share one
// buffer) every time is the same to the nanosecond: the model's costs follow how many bytes a
// message or a reduction covers, never what they hold, with the CPU model on too (the tap counts
// skipped reductions). Tried on the ring, the tree, the small ops' agreement (which reads its
// headers) and a named op (rank 0's control messages). The arithmetic is back on afterwards.
std::vector<double> opTimes(bool payload, priocclAlgorithm_t algorithm, size_t bytes, bool named,
                            bool cpuModel) {
  constexpr int kRanks = 16;
  SimOptions o;
  o.fabric.payload = payload;
  if (cpuModel) {
    o.fabric.copyBytesPerSecond = 2e9;
    o.fabric.reduceBytesPerSecond = 1e9;
    o.fabric.sharedCores = 2;
  }
  o.algorithm = algorithm;
  Simulation sim(kRanks, o);
  RankBuffers data(kRanks, bytes / sizeof(float), payload);
  std::vector<size_t> ops;
  for (int r = 0; r < kRanks; ++r) {
    ops.push_back(sim.submit(r, 0, allReduceOp(data.of(r), data.count(), 1, named ? "g" : "")));
    ops.push_back(sim.submit(r, 1e-4, allReduceOp(data.of(r), 64, 0)));
  }
  sim.run();
  std::vector<double> times;
  for (size_t i : ops) times.push_back(sim.endedAt(i) - sim.submittedAt(i));
  return times;
}

TEST(Sim, WithoutPayloadEveryTimeIsTheSame) {
  for (auto algorithm : {priocclAlgoRing, priocclAlgoTree, priocclAlgoAuto})
    for (size_t bytes : {size_t{4} << 10, size_t{4} << 20})
      for (bool named : {false, true})
        for (bool cpu : {false, true})
          EXPECT_EQ(opTimes(true, algorithm, bytes, named, cpu),
                    opTimes(false, algorithm, bytes, named, cpu))
              << prioccl::algorithmName(algorithm) << " " << bytes << " B named=" << named
              << " cpu model=" << cpu;
  float a = 1, b = 2, sum = 0;
  prioccl::reduce::apply(&sum, &a, &b, 1, priocclFloat32, priocclSum, 1);
  EXPECT_EQ(sum, 3.0f);
}

// 2 ranks, one recursive-doubling all-reduce of one 1 MiB chunk at 1 Gbit/s, no latency, no CPU
// per message: each rank sends its chunk to the other (W on the wire) and reduces the one it
// received (R): W + R. On one core shared by both, the second rank's reduction waits for the
// first's: W + 2R. A copy cost per byte (C for the chunk) is paid at a rank's send and at its
// receive: W + 2C. With both ranks on one host (their copies through memory at the same 1 Gbit/s)
// the inter-host copy costs nothing and the intra-host one takes its place. The CPU the model
// reports is the charges summed over both ranks: 2R, or 4C.
TEST(Sim, ReductionsAndCopiesCostTheirBytesAndSharedCoresQueueThem) {
  constexpr size_t kChunk = size_t{1} << 20;
  auto run = [&](double copyRate, double reduceRate, int cores, double intraCopyRate = -1) {
    SimOptions o = wireOnly(1e9);
    o.fabric.copyBytesPerSecond = copyRate;
    o.fabric.reduceBytesPerSecond = reduceRate;
    o.fabric.sharedCores = cores;
    if (intraCopyRate >= 0) {  // one host
      o.fabric.ranksPerHost = 2;
      o.fabric.intraBitsPerSecond = 1e9;
      o.fabric.intraLatencySeconds = 0;
      o.fabric.intraCopyBytesPerSecond = intraCopyRate;
    }
    o.config.chunkBytes = kChunk;
    o.algorithm = priocclAlgoRecursiveDoubling;  // whole chunks: the op is not cut finer
    const RanksRun r = allReduceOfRanks(2, o, kChunk);
    EXPECT_EQ(r.chunk, kChunk);
    return r;
  };
  auto slowest = [&](double copyRate, double reduceRate, int cores, double intraCopyRate = -1) {
    return slowestOf(run(copyRate, reduceRate, cores, intraCopyRate));
  };
  const double w = kChunk / (1e9 / 8), r = kChunk / 1e9, c = kChunk / 2e9;
  const double free = slowest(0, 0, 0);
  EXPECT_NEAR(free, w, w * 0.001);
  EXPECT_NEAR(slowest(0, 1e9, 0), w + r, free * 0.001);
  EXPECT_NEAR(slowest(0, 1e9, 1), w + 2 * r, free * 0.001);
  EXPECT_NEAR(slowest(0, 1e9, 2), w + r, free * 0.001);
  EXPECT_NEAR(slowest(2e9, 0, 0), w + 2 * c, free * 0.001);
  EXPECT_NEAR(slowest(2e9, 0, 0, 0), w, free * 0.001);
  EXPECT_NEAR(slowest(0, 0, 0, 2e9), w + 2 * c, free * 0.001);
  EXPECT_NEAR(run(0, 0, 0).cpuSeconds, 0, 1e-9);
  EXPECT_NEAR(run(0, 1e9, 0).cpuSeconds, 2 * r, r * 0.001);
  EXPECT_NEAR(run(2e9, 0, 0).cpuSeconds, 4 * c, c * 0.001);
  EXPECT_NEAR(run(0, 0, 0, 2e9).cpuSeconds, 4 * c, c * 0.001);
}

// A fat tree of 2 leaves x 2 hosts, one rank each, 1 Gbit/s NICs without latency or CPU cost; a
// ring all-reduce of 1 MiB crosses the core twice (rank 1 to 2, 3 to 0), one flow per uplink.
// At oversubscription 2 an uplink carries its 2 hosts' rate / 2, one NIC's: the same time as one
// switch. At 4 it carries half a NIC's, and the crossing steps, and so the ring, take twice as
// long.
TEST(Sim, AnOversubscribedCoreSlowsTheStepsThatCrossIt) {
  auto slowest = [](int hostsPerLeaf, double oversubscription) {
    SimOptions o = wireOnly(1e9);
    o.fabric.hostsPerLeaf = hostsPerLeaf;
    o.fabric.oversubscription = oversubscription;
    o.algorithm = priocclAlgoRing;
    return slowestOf(allReduceOfRanks(4, o, size_t{1} << 20));
  };
  const double oneSwitch = slowest(0, 1);
  EXPECT_NEAR(slowest(2, 1), oneSwitch, oneSwitch * 0.001);
  EXPECT_NEAR(slowest(2, 2), oneSwitch, oneSwitch * 0.001);
  EXPECT_NEAR(slowest(2, 4), 2 * oneSwitch, oneSwitch * 0.02);
}

// 4 hosts x 8 ranks, 10 Gbit/s NICs without latency or CPU cost, one hierarchical all-reduce of
// 32 MiB: each NIC carries its 8 shards' inter-host rings, 2 (h - 1) / h of the op, 48 MiB in
// all, and the memory's copies overlap it. Each rank has an eighth of the NIC, so against the
// whole link every rank looked underused, and every window in which a send waited for the credit
// doubled it (to 1 MiB here, 16 MiB at most) although the NIC was full: the credit tuner judges a
// rank by its share of its host's NIC, and here the credit stays at its start.
TEST(Sim, RanksSharingANicJudgeItByTheirShare) {
  constexpr int kRanks = 32;
  constexpr size_t kBytes = size_t{32} << 20;
  SimOptions o = wireOnly(10e9);
  o.fabric.ranksPerHost = 8;
  o.fabric.payload = false;
  o.algorithm = priocclAlgoHierarchical;
  Simulation sim(kRanks, o);
  RankBuffers data(kRanks, kBytes / sizeof(float), false);
  std::vector<size_t> ops;
  for (int r = 0; r < kRanks; ++r)
    ops.push_back(sim.submit(r, 0, allReduceOp(data.of(r), data.count(), 0)));
  sim.run();
  const double hand = 2.0 * 3 / 4 * static_cast<double>(kBytes) / (10e9 / 8);
  EXPECT_NEAR(sim.slowest(ops), hand, hand * 0.03);
  EXPECT_EQ(sim.highestCredit(), sim.config().creditBytes);
}

}  // namespace
