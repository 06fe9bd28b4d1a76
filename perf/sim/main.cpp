// prioccl_sim: prioccl's own engines over a simulated fabric (simulation.h), at rank counts and
// link rates this machine does not have. Prints one line per run: the simulated times, and what
// the simulation itself cost (wall time, memory).
//
//   prioccl_sim --ranks 16 --rate 10G --workload allreduce --bytes 64M
//   prioccl_sim --ranks 64 --rate 100G --workload priority --bytes 1G --urgent 64K
//   prioccl_sim --ranks 1024 --rate 100G --workload train --mode wfbp,p3 --no-payload
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/parse_size.h"
#include "plan.h"
#include "profile.h"
#include "simulation.h"

namespace {

using prioccl::sim::allReduceOp;
using prioccl::sim::RankBuffers;
using prioccl::sim::SimOptions;
using prioccl::sim::Simulation;

struct Args {
  std::vector<int> ranks{16};
  std::string rate = "10G";
  double latencyUs = 5, cpuUs = 1, wireEfficiency = 1;
  double copyGBps = 0, intraCopyGBps = 0, reduceGBps = 0;  // 0: free
  int sharedCores = 0;                                     // 0: a core per rank
  int hostsPerLeaf = 0;                                    // 0: one switch
  double oversubscription = 1;
  int ranksPerHost = 1;
  std::string intraRate = "100G";
  std::string workload = "allreduce";
  std::string bytes = "64M", urgent = "1M";  // priority_perf's defaults
  double urgentAtMs = -1;                    // < 0: priority_perf's, 25% of the bulk op alone
  std::string algo = "auto", schedule = "priority";
  bool named = false;
  std::string chunk = "auto", credit = "auto";  // PRIOCCL_CHUNK_BYTES, PRIOCCL_CREDIT_BYTES
  bool noPayload = false;
  std::string profile = "perf/profiles/vgg19.csv";
  double paramScale = 1, computeScale = 1;  // train_emu's --param-scale, --compute-scale
  std::vector<std::string> modes{"wfbp", "p3"};
};

// Runs the simulation; returns what it took in real time.
double wallSecondsOfRun(Simulation& sim) {
  auto start = std::chrono::steady_clock::now();
  sim.run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double maxRssGiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / (1 << 20);  // ru_maxrss is in KiB
}

// "10G", "400G", "1.5G", "300M" (bits/s, decimal multiples as link rates are quoted).
double parseRate(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  static const std::map<std::string, double> scale{{"", 1},     {"K", 1e3}, {"M", 1e6}, {"G", 1e9},
                                                   {"T", 1e12}, {"k", 1e3}, {"m", 1e6}, {"g", 1e9}};
  auto it = scale.find(end ? std::string(end) : "");
  if (end == s.c_str() || it == scale.end() || !(v > 0))
    throw CLI::ValidationError("--rate", "a positive number with K, M, G or T (bits/s): " + s);
  return v * it->second;
}

size_t parseBytes(const char* what, const std::string& s) {
  unsigned long long v = 0;
  if (!prioccl::common::parseSize(s.c_str(), &v) || v == 0)
    throw CLI::ValidationError(what, "a size such as 64K, 1M, 1G: " + s);
  return static_cast<size_t>(v);
}

priocclAlgorithm_t parseAlgo(const std::string& s) {
  static const std::map<std::string, priocclAlgorithm_t> names{
      {"auto", priocclAlgoAuto},          {"ring", priocclAlgoRing},
      {"tree", priocclAlgoTree},          {"rd", priocclAlgoRecursiveDoubling},
      {"hd", priocclAlgoHalvingDoubling}, {"hier", priocclAlgoHierarchical}};
  auto it = names.find(s);
  if (it == names.end()) throw CLI::ValidationError("--algo", "auto, ring, tree, rd, hd or hier");
  return it->second;
}

// Every rank all-reduces `bytes` at once; the op's time is the slowest rank's.
// Named ops are matched through rank 0's negotiation; rank 0's messages against the mean show
// what that costs it.
void allreduce(int ranks, const SimOptions& o, size_t bytes, bool named) {
  Simulation sim(ranks, o);
  RankBuffers data(ranks, bytes / sizeof(float), o.fabric.payload);
  std::vector<size_t> ops;
  for (int r = 0; r < ranks; ++r)
    ops.push_back(sim.submit(r, 0, allReduceOp(data.of(r), data.count(), 0, named ? "grad" : "")));
  const double w = wallSecondsOfRun(sim);
  const double t = sim.slowest(ops);
  const double algbw = static_cast<double>(bytes) / t / 1e9;
  const double meanMessages = 2.0 * static_cast<double>(sim.fabric().messages()) / ranks;
  const double meanBytes = 2.0 * static_cast<double>(sim.fabric().bytes()) / ranks;
  std::printf(
      "allreduce ranks=%d per_host=%d algo=%s bytes=%zu rate=%.3gGbit/s latency=%.3gus "
      "cpu=%.3gus copy=%.3gGBps intra_copy=%.3gGBps reduce=%.3gGBps shared_cores=%d "
      "per_leaf=%d oversub=%.3g chunk=%zu named=%d payload=%d "
      "time_us=%.1f algbw_GBps=%.3f busbw_GBps=%.3f messages=%llu rank0_messages=%llu "
      "mean_rank_messages=%.0f rank0_bytes=%llu mean_rank_bytes=%.0f cpu_s=%.4f rounds=%llu "
      "credit_max=%zu wall_s=%.2f maxrss_GiB=%.2f\n",
      ranks, o.fabric.ranksPerHost, prioccl::algorithmName(sim.op(ops[0]).algorithm), bytes,
      o.fabric.bitsPerSecond / 1e9, o.fabric.latencySeconds * 1e6,
      o.fabric.cpuPerMessageSeconds * 1e6, o.fabric.copyBytesPerSecond / 1e9,
      o.fabric.intraCopyBytesPerSecond / 1e9, o.fabric.reduceBytesPerSecond / 1e9,
      o.fabric.sharedCores, o.fabric.hostsPerLeaf, o.fabric.oversubscription,
      sim.config().chunkBytes, named ? 1 : 0, o.fabric.payload ? 1 : 0, t * 1e6, algbw,
      algbw * 2.0 * (ranks - 1) / ranks, static_cast<unsigned long long>(sim.fabric().messages()),
      static_cast<unsigned long long>(sim.fabric().messagesOf(0)), meanMessages,
      static_cast<unsigned long long>(sim.fabric().bytesOf(0)), meanBytes,
      sim.fabric().cpuSeconds(), static_cast<unsigned long long>(sim.rounds()), sim.highestCredit(),
      w, maxRssGiB());
}

// priority_perf's pattern: a bulk all-reduce (priority 100) starts, an urgent one (priority 0)
// arrives `at` later (< 0: 25% of the bulk op's time alone); the urgent op's time against the
// same op alone.
void priority(int ranks, const SimOptions& o, size_t bulkBytes, size_t urgentBytes, double at) {
  // The slowest rank's time of the urgent (or the bulk) op, each submitted where its size > 0.
  auto opTime = [&](size_t urgentSize, size_t bulkSize, bool timeUrgent) {
    Simulation sim(ranks, o);
    RankBuffers bulk(ranks, bulkSize / sizeof(float), o.fabric.payload);
    RankBuffers urgent(ranks, urgentSize / sizeof(float), o.fabric.payload);
    std::vector<size_t> ops;
    for (int r = 0; r < ranks; ++r) {
      if (bulkSize) {
        size_t i = sim.submit(r, 0, allReduceOp(bulk.of(r), bulk.count(), 100));
        if (!timeUrgent) ops.push_back(i);
      }
      if (urgentSize) {
        size_t i = sim.submit(r, bulkSize ? at : 0, allReduceOp(urgent.of(r), urgent.count(), 0));
        if (timeUrgent) ops.push_back(i);
      }
    }
    sim.run();
    return sim.slowest(ops);
  };
  if (at < 0) at = 0.25 * opTime(0, bulkBytes, false);
  const double alone = opTime(urgentBytes, 0, true), behind = opTime(urgentBytes, bulkBytes, true);
  std::printf(
      "priority ranks=%d bulk=%zu urgent=%zu at_ms=%.3g rate=%.3gGbit/s schedule=%s "
      "alone_us=%.1f with_bulk_us=%.1f slowdown=%.2f maxrss_GiB=%.2f\n",
      ranks, bulkBytes, urgentBytes, at * 1e3, o.fabric.bitsPerSecond / 1e9,
      o.config.schedule == priocclScheduleFifo ? "fifo" : "priority", alone * 1e6, behind * 1e6,
      behind / alone, maxRssGiB());
}

// The ops of `plan` on every rank, each submitted at `start` + when its trigger layer's gradient
// is ready (`ready`, from the start of backward) + its delay. Returns each op's indices.
std::vector<std::vector<size_t>> submitPlan(Simulation& sim, const emu::Plan& plan,
                                            RankBuffers& grads, const std::vector<double>& ready,
                                            double start) {
  std::vector<std::vector<size_t>> ops(plan.ops.size());
  for (size_t k = 0; k < plan.ops.size(); ++k) {
    const emu::PlannedOp& p = plan.ops[k];
    for (int r = 0; r < sim.ranks(); ++r)
      ops[k].push_back(sim.submit(r, start + ready[p.trigger] + p.delayMs * 1e-3,
                                  allReduceOp(grads.of(r) + p.offset, p.count, p.priority)));
  }
  return ops;
}

// The training workload's compute: when each layer's gradient is ready (s from the start of
// backward), and backward's and the whole iteration's compute time.
struct TrainTimes {
  std::vector<double> ready;
  double backward = 0, compute = 0;
};

TrainTimes trainTimes(const emu::Profile& profile) {
  TrainTimes t;
  t.ready.resize(profile.layers.size());
  for (size_t i = profile.layers.size(); i-- > 0;)
    t.ready[i] = (t.backward += profile.layers[i].bwdMs * 1e-3);
  t.compute = t.backward + profile.fwdMs() * 1e-3;
  return t;
}

// wfbp, p3: one iteration. The next forward pass runs layer by layer, each layer waiting for what
// the mode makes it wait for (wfbp: every op; p3: its own layer's). The iteration runs from the
// start of backward to the end of that forward (backward + forward + the communication neither
// hides). Adds the run's wall time to *wall.
double gatedIteration(Simulation& sim, const emu::Plan& plan, const emu::Profile& profile,
                      RankBuffers& grads, const TrainTimes& times, double* wall) {
  auto ops = submitPlan(sim, plan, grads, times.ready, 0);
  *wall += wallSecondsOfRun(sim);
  // When each layer's ops have ended on every rank, and the next forward pass over them.
  std::vector<double> synced(profile.layers.size(), 0.0);
  double allSynced = 0;
  for (size_t k = 0; k < plan.ops.size(); ++k)
    for (size_t i : ops[k]) {
      for (size_t l = plan.ops[k].firstLayer; l <= plan.ops[k].lastLayer; ++l)
        synced[l] = std::max(synced[l], sim.endedAt(i));
      allSynced = std::max(allSynced, sim.endedAt(i));
    }
  double forward = times.backward;
  for (size_t l = 0; l < profile.layers.size(); ++l) {
    const double gate = plan.wait == emu::Wait::kBeforeForward ? synced[l] : allSynced;
    forward = std::max(forward, gate) + profile.layers[l].fwdMs * 1e-3;
  }
  return forward;
}

// lagged (LaggedAllReduce): one op over the whole buffer at the end of each backward, waited for
// at the end of the next iteration's backward. An op goes at the later of its backward's end and
// the previous op's end, so ops of successive iterations never overlap and each runs in turn.
// Two iterations; returns the second's time, from one submission to the next (forward,
// backward, and the wait for the op), the steady state's. Adds the runs' wall time to *wall.
double laggedIteration(Simulation& sim, const emu::Plan& plan, RankBuffers& grads,
                       const TrainTimes& times, double* wall) {
  double start = 0, iteration = 0;  // start: of this iteration's backward
  for (int i = 0; i < 2; ++i) {
    auto ops = submitPlan(sim, plan, grads, times.ready, start);
    *wall += wallSecondsOfRun(sim);
    double ended = 0;
    for (const auto& op : ops)
      for (size_t k : op) ended = std::max(ended, sim.endedAt(k));
    const double next = std::max(start + times.compute, ended - times.backward);
    iteration = next - start;
    start = next;
  }
  return iteration;
}

// Training iterations of `profile` under a gradient-sync mode (train_emu's plans: the same ops,
// sizes, priorities, schedule and triggers as perf/train_emu runs), every rank alike: backward
// runs from the last layer to the first, and each op is submitted once its trigger layer's
// gradient is ready; then as gatedIteration or laggedIteration says.
void train(int ranks, SimOptions o, const emu::Profile& profile, const std::string& modeName) {
  const emu::ModeSpec mode = emu::parseMode(modeName);
  if (mode.mode != emu::Mode::kWfbp && mode.mode != emu::Mode::kP3 &&
      mode.mode != emu::Mode::kLagged)
    throw std::invalid_argument("--mode: wfbp, p3 or lagged (the simulator runs these plans; " +
                                modeName + "'s is not run)");
  const emu::Plan plan = emu::makePlan(profile, mode, emu::PlanOptions{});
  o.config.schedule = plan.fifo ? priocclScheduleFifo : priocclSchedulePriority;
  Simulation sim(ranks, o);
  const TrainTimes times = trainTimes(profile);
  RankBuffers grads(ranks, plan.elements, o.fabric.payload);
  double w = 0;
  const double iteration = plan.wait == emu::Wait::kNextIteration
                               ? laggedIteration(sim, plan, grads, times, &w)
                               : gatedIteration(sim, plan, profile, grads, times, &w);
  std::printf(
      "train ranks=%d model=%s mode=%s rate=%.3gGbit/s params=%zu ops=%zu chunk=%zu "
      "iteration_ms=%.2f compute_ms=%.2f exposed_comm_ms=%.2f messages=%llu credit_max=%zu "
      "wall_s=%.2f maxrss_GiB=%.2f\n",
      ranks, profile.name.c_str(), modeName.c_str(), o.fabric.bitsPerSecond / 1e9, plan.elements,
      plan.ops.size(), sim.config().chunkBytes, iteration * 1e3, times.compute * 1e3,
      (iteration - times.compute) * 1e3, static_cast<unsigned long long>(sim.fabric().messages()),
      sim.highestCredit(), w, maxRssGiB());
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"prioccl_sim: prioccl's engines over a simulated fabric"};
  app.add_option("--ranks", a.ranks, "rank counts (each one run)")->delimiter(',');
  app.add_option("--rate", a.rate, "each NIC's rate, bits/s (10G, 400G)");
  app.add_option("--latency-us", a.latencyUs, "one-way latency");
  app.add_option("--cpu-us", a.cpuUs, "CPU per message posted or completed");
  app.add_option("--copy-gbytes-per-s", a.copyGBps,
                 "CPU per byte sent to or received from another host (a TCP stack's copies), as "
                 "a rate in GB/s; 0: free");
  app.add_option("--intra-copy-gbytes-per-s", a.intraCopyGBps,
                 "the same between ranks of one host (TCP over loopback, shared memory's "
                 "copies); 0: free");
  app.add_option("--reduce-gbytes-per-s", a.reduceGBps,
                 "a core's rate through the reductions, GB/s of output; 0: free");
  app.add_option("--shared-cores", a.sharedCores,
                 "every rank's CPU work on this many cores (one machine running them all, as "
                 "the testbed); 0: a core per rank");
  app.add_option("--hosts-per-leaf", a.hostsPerLeaf,
                 "a fat tree: hosts per leaf switch (0: one switch, full bisection)");
  app.add_option("--oversubscription", a.oversubscription,
                 "a leaf's hosts' rate over its uplink's (2: the uplink carries half)");
  app.add_option("--wire-efficiency", a.wireEfficiency,
                 "payload share of the wire's bits (TCP over Ethernet, MTU 1500: 0.956)");
  app.add_option("--ranks-per-host", a.ranksPerHost,
                 "consecutive ranks sharing a host (its NIC; memory between them)");
  app.add_option("--intra-rate", a.intraRate, "a rank's copies to its host's others, bits/s");
  app.add_option("--workload", a.workload, "allreduce | priority | train")
      ->check(CLI::IsMember({"allreduce", "priority", "train"}));
  app.add_option("--profile", a.profile, "train: a train_emu profile (perf/profiles/*.csv)");
  app.add_option("--param-scale", a.paramScale,
                 "train: the profile's parameters times this (train_emu's --param-scale)")
      ->check(CLI::PositiveNumber);
  app.add_option("--compute-scale", a.computeScale,
                 "train: the profile's layer times times this (train_emu's --compute-scale)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--mode", a.modes, "train: wfbp, p3, lagged (each one run)")->delimiter(',');
  app.add_option("--bytes", a.bytes, "the all-reduce's (priority: the bulk op's) size");
  app.add_option("--urgent", a.urgent, "priority: the urgent op's size");
  app.add_option("--urgent-at-ms", a.urgentAtMs, "priority: when the urgent op arrives");
  app.add_option("--algo", a.algo, "auto | ring | tree | rd | hd | hier");
  app.add_flag("--named", a.named, "allreduce: a named op (matched through rank 0)");
  app.add_option("--chunk", a.chunk, "the chunk size (PRIOCCL_CHUNK_BYTES; default auto)");
  app.add_option("--credit", a.credit,
                 "the send credit, fixed (PRIOCCL_CREDIT_BYTES; default auto)");
  app.add_option("--schedule", a.schedule, "priority | fifo")
      ->check(CLI::IsMember({"priority", "fifo"}));
  app.add_flag("--no-payload", a.noPayload,
               "messages without their bytes, reductions skipped: the same times, for rank "
               "counts whose data would not fit");
  CLI11_PARSE(app, argc, argv);
  try {
    SimOptions o;
    o.fabric.bitsPerSecond = parseRate(a.rate);
    o.fabric.latencySeconds = a.latencyUs * 1e-6;
    o.fabric.cpuPerMessageSeconds = a.cpuUs * 1e-6;
    o.fabric.wireEfficiency = a.wireEfficiency;
    o.fabric.copyBytesPerSecond = a.copyGBps * 1e9;
    o.fabric.intraCopyBytesPerSecond = a.intraCopyGBps * 1e9;
    o.fabric.reduceBytesPerSecond = a.reduceGBps * 1e9;
    o.fabric.sharedCores = a.sharedCores;
    o.fabric.hostsPerLeaf = a.hostsPerLeaf;
    o.fabric.oversubscription = a.oversubscription;
    o.fabric.ranksPerHost = a.ranksPerHost;
    o.fabric.intraBitsPerSecond = parseRate(a.intraRate);
    o.fabric.payload = !a.noPayload;
    o.algorithm = parseAlgo(a.algo);
    o.config.schedule = a.schedule == "fifo" ? priocclScheduleFifo : priocclSchedulePriority;
    if (a.chunk != "auto") o.config.chunkBytes = parseBytes("--chunk", a.chunk);
    if (a.credit != "auto") o.config.creditBytes = parseBytes("--credit", a.credit);
    const size_t bytes = parseBytes("--bytes", a.bytes);
    const emu::Profile profile = a.workload == "train" ? emu::scaled(emu::loadProfile(a.profile),
                                                                     a.paramScale, a.computeScale)
                                                       : emu::Profile{};
    for (int n : a.ranks) {
      if (a.workload == "train")
        for (const std::string& m : a.modes) train(n, o, profile, m);
      else if (a.workload == "allreduce")
        allreduce(n, o, bytes, a.named);
      else
        priority(n, o, bytes, parseBytes("--urgent", a.urgent),
                 a.urgentAtMs < 0 ? -1.0 : a.urgentAtMs * 1e-3);
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prioccl_sim: %s\n", e.what());
    return 1;
  }
  return 0;
}
