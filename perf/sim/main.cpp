// prioccl_sim: prioccl's own engines over a simulated fabric (simulation.h), at rank counts and
// link rates this machine does not have. Prints one line per run: the simulated times, and what
// the simulation itself cost (wall time, memory).
//
//   prioccl_sim --ranks 16 --rate 10G --workload allreduce --bytes 64M
//   prioccl_sim --ranks 64 --rate 100G --workload priority --bytes 1G --urgent 64K
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <vector>

#include "common/parse_size.h"
#include "simulation.h"

namespace {

using prioccl::sim::allReduceOp;
using prioccl::sim::SimOptions;
using prioccl::sim::Simulation;

struct Args {
  std::vector<int> ranks{16};
  std::string rate = "10G";
  double latencyUs = 5, cpuUs = 1, wireEfficiency = 1;
  int ranksPerHost = 1;
  std::string intraRate = "100G";
  std::string workload = "allreduce";
  std::string bytes = "64M", urgent = "1M";  // priority_perf's defaults
  double urgentAtMs = -1;                    // < 0: priority_perf's, 25% of the bulk op alone
  std::string algo = "auto", schedule = "priority";
  bool named = false;
  std::string chunk = "auto", credit = "auto";  // PRIOCCL_CHUNK_BYTES, PRIOCCL_CREDIT_BYTES
};

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
  const size_t count = bytes / sizeof(float);
  std::vector<std::vector<float>> data(ranks, std::vector<float>(count, 1.0f));
  std::vector<size_t> ops;
  for (int r = 0; r < ranks; ++r)
    ops.push_back(sim.submit(r, 0, allReduceOp(data[r].data(), count, 0, named ? "grad" : "")));
  auto wall = std::chrono::steady_clock::now();
  sim.run();
  double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  const double t = sim.slowest(ops);
  const double algbw = static_cast<double>(bytes) / t / 1e9;
  const double meanMessages = 2.0 * static_cast<double>(sim.fabric().messages()) / ranks;
  std::printf(
      "allreduce ranks=%d per_host=%d algo=%s bytes=%zu rate=%.3gGbit/s latency=%.3gus "
      "cpu=%.3gus chunk=%zu named=%d "
      "time_us=%.1f algbw_GBps=%.3f busbw_GBps=%.3f messages=%llu rank0_messages=%llu "
      "mean_rank_messages=%.0f rounds=%llu wall_s=%.2f maxrss_GiB=%.2f\n",
      ranks, o.fabric.ranksPerHost, prioccl::algorithmName(sim.op(ops[0]).algorithm), bytes,
      o.fabric.bitsPerSecond / 1e9, o.fabric.latencySeconds * 1e6,
      o.fabric.cpuPerMessageSeconds * 1e6, sim.config().chunkBytes, named ? 1 : 0, t * 1e6, algbw,
      algbw * 2.0 * (ranks - 1) / ranks, static_cast<unsigned long long>(sim.fabric().messages()),
      static_cast<unsigned long long>(sim.fabric().messagesOf(0)), meanMessages,
      static_cast<unsigned long long>(sim.rounds()), w, maxRssGiB());
}

// priority_perf's pattern: a bulk all-reduce (priority 100) starts, an urgent one (priority 0)
// arrives `at` later (< 0: 25% of the bulk op's time alone); the urgent op's time against the
// same op alone.
void priority(int ranks, const SimOptions& o, size_t bulkBytes, size_t urgentBytes, double at) {
  // The slowest rank's time of the urgent (or the bulk) op, each submitted where its size > 0.
  auto opTime = [&](size_t urgentSize, size_t bulkSize, bool timeUrgent) {
    Simulation sim(ranks, o);
    std::vector<std::vector<float>> bulk(ranks), urgent(ranks);
    std::vector<size_t> ops;
    for (int r = 0; r < ranks; ++r) {
      if (bulkSize) {
        bulk[r].assign(bulkSize / sizeof(float), 1.0f);
        size_t i = sim.submit(r, 0, allReduceOp(bulk[r].data(), bulk[r].size(), 100));
        if (!timeUrgent) ops.push_back(i);
      }
      if (urgentSize) {
        urgent[r].assign(urgentSize / sizeof(float), 1.0f);
        size_t i =
            sim.submit(r, bulkSize ? at : 0, allReduceOp(urgent[r].data(), urgent[r].size(), 0));
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

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"prioccl_sim: prioccl's engines over a simulated fabric"};
  app.add_option("--ranks", a.ranks, "rank counts (each one run)")->delimiter(',');
  app.add_option("--rate", a.rate, "each NIC's rate, bits/s (10G, 400G)");
  app.add_option("--latency-us", a.latencyUs, "one-way latency");
  app.add_option("--cpu-us", a.cpuUs, "CPU per message posted or completed");
  app.add_option("--wire-efficiency", a.wireEfficiency,
                 "payload share of the wire's bits (TCP over Ethernet, MTU 1500: 0.956)");
  app.add_option("--ranks-per-host", a.ranksPerHost,
                 "consecutive ranks sharing a host (its NIC; memory between them)");
  app.add_option("--intra-rate", a.intraRate, "a rank's copies to its host's others, bits/s");
  app.add_option("--workload", a.workload, "allreduce | priority")
      ->check(CLI::IsMember({"allreduce", "priority"}));
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
  CLI11_PARSE(app, argc, argv);
  try {
    SimOptions o;
    o.fabric.bitsPerSecond = parseRate(a.rate);
    o.fabric.latencySeconds = a.latencyUs * 1e-6;
    o.fabric.cpuPerMessageSeconds = a.cpuUs * 1e-6;
    o.fabric.wireEfficiency = a.wireEfficiency;
    o.fabric.ranksPerHost = a.ranksPerHost;
    o.fabric.intraBitsPerSecond = parseRate(a.intraRate);
    o.algorithm = parseAlgo(a.algo);
    o.config.schedule = a.schedule == "fifo" ? priocclScheduleFifo : priocclSchedulePriority;
    if (a.chunk != "auto") o.config.chunkBytes = parseBytes("--chunk", a.chunk);
    if (a.credit != "auto") o.config.creditBytes = parseBytes("--credit", a.credit);
    const size_t bytes = parseBytes("--bytes", a.bytes);
    for (int n : a.ranks) {
      if (a.workload == "allreduce")
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
