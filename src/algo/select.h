// Per-op algorithm choice from an alpha-beta cost model.
//
// Each algorithm's time for an op of n bytes is modelled as alpha + beta * n, with alpha and beta
// fitted per size interval from measured times (Calibration: a few ops of each algorithm at each
// calibration size, run by the engine itself at communicator creation, so alpha includes every
// per-op and per-step cost of this library, not only the wire's). Above the largest calibrated
// size the last interval's beta extends. The choice is the algorithm with the least modelled
// time; every rank holds the same table (the slowest rank's times), so every rank chooses alike.
//
// Calibration times single ops, which a link may carry faster than it carries a stream of them
// (a switch's or shaper's burst allowance: the 1 Gbit/s testbed passes 125 KB at once). So no
// algorithm is modelled faster than the bytes each rank sends at the link's sustained bandwidth
// (measured at creation) allow: recursive doubling sends log2(p) times the op, the double binary
// tree twice, halving-doubling and the ring 2(p-1)/p (the least any all-reduce sends).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "prioccl/prioccl.h"

namespace prioccl {

// Two levels of links, measured separately at creation when ranks share hosts (several ranks on
// some host, more than one host): inside a host (shared memory or loopback) and between hosts
// (each rank's share of its host's link while every local rank sends at once). Every rank holds
// the slowest rank's figures.
struct HostLevels {
  int hosts = 0;   // 0: one level (the hierarchical all-reduce is then never chosen by the model)
  int shards = 1;  // fewest ranks on a host: the hierarchical all-reduce's shards
  int most = 1;    // most ranks on a host
  double intraBytesPerSecond = 0, intraLatencySeconds = 0;
  double interBytesPerSecond = 0, interLatencySeconds = 0;
};

// One term of a size rule list (PRIOCCL_ALGO="rd<64K,tree"): ops below `below` bytes use `algo`.
struct AlgoRule {
  size_t below;
  priocclAlgorithm_t algo;  // auto: the cost model (or the fixed rule) decides
};
// Parses "ALGO<SIZE,...,ALGO" (sizes increasing, the last term without one); "" gives no rules.
// Throws InvalidArgument naming `name`. Defined in api/config.cpp with the other parsers.
std::vector<AlgoRule> parseAlgorithmRules(const char* name, const std::string& text);

class AlgoSelector {
 public:
  // Sizes (bytes) measured at creation; the first is the latency point.
  static std::vector<size_t> calibrationSizes(int nranks);

  // Without measurements: a fixed rule (recursive doubling below kFixedHdFromBytes,
  // halving-doubling from there up to fixedHdToBytes_, ring above; the hierarchical all-reduce
  // from kFixedHierBytes where there are two levels), or the forced algorithm.
  static constexpr size_t kFixedHdFromBytes = 32 << 10, kFixedHdToBytes = 64 << 10,
                          kFixedHdBytesPerRank = 64 << 10, kFixedHierBytes = 256 << 10;
  explicit AlgoSelector(priocclAlgorithm_t forced = priocclAlgoAuto) : forced_(forced) {}
  // times[k][i]: seconds of algoRegistry()[k] at calibrationSizes()[i].
  void calibrate(const std::vector<size_t>& sizes, const std::vector<std::vector<double>>& times);

  // Size rules take precedence over the model (and over `forced`) where they name an algorithm.
  // Replaces both, keeping any calibration.
  void setPolicy(priocclAlgorithm_t forced, std::vector<AlgoRule> rules) {
    forced_ = forced;
    rules_ = std::move(rules);
  }
  // Whether choose() can reach the cost model, i.e. whether calibrating is of any use.
  bool usesModel() const;

  priocclAlgorithm_t choose(size_t bytes) const;
  double modelSeconds(priocclAlgorithm_t a, size_t bytes) const;  // < 0 when not calibrated
  bool calibrated() const { return !sizes_.empty(); }
  // The link's sustained bandwidth per rank (0: unknown, no floor) and the rank count.
  void setLink(double bytesPerSecond, int nranks);
  // The two levels' links (after setLink): the hierarchical all-reduce's floor is its slower
  // level's bytes at that level's rate; without them the model never chooses it.
  void setLevels(const HostLevels& levels);
  // The model, one line per algorithm (alpha in us, beta in ns/byte per interval) and crossovers.
  std::string describe() const;

 private:
  priocclAlgorithm_t modelChoice(size_t bytes) const;  // the model, or the fixed rule without one

  priocclAlgorithm_t forced_;
  std::vector<AlgoRule> rules_;
  std::vector<size_t> sizes_;
  std::vector<std::vector<double>> times_;  // per algoRegistry() row
  double linkBytesPerSecond_ = 0;
  // Halving-doubling's upper bound under the fixed rule, set by setLink: kFixedHdBytesPerRank x
  // the ranks (a ring step of up to 64 KiB) where it sends no more than the ring, else
  // kFixedHdToBytes.
  size_t fixedHdToBytes_ = kFixedHdToBytes;
  HostLevels levels_;
  // Seconds per byte of the op that the floor gives each algorithm (0: no floor); set once by
  // setLink, since choose() runs for every op.
  std::vector<double> wireSecondsPerByte_;
};

}  // namespace prioccl
