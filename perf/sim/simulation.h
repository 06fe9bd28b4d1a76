// N of prioccl's own engines (core/engine.h) over a simulated fabric (sim_fabric.h), stepped on
// one thread under the simulated clock: the library's negotiation, matcher, lanes, step
// machines and send scheduler decide everything; only the network is a model.
//
// Each engine runs without a thread of its own (Engine::Progress::kCallerSteps). A rank gets a
// round of progress whenever an event concerns it (a message landed, a send completed, an op was
// submitted), and while it has ops in flight, one every `tickSeconds` as well, for the rules that
// act on time alone (the scheduler's stall escape, the credit tuner).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algo/select.h"
#include "core/engine.h"
#include "core/op.h"
#include "sim_fabric.h"

namespace prioccl::sim {

struct SimOptions {
  FabricSpec fabric;
  // The engines' configuration. Left at 0 (auto), chunk and credit sizes follow from the
  // fabric's rate and latency as a real communicator derives them from its measured links
  // (Config::resolveAuto).
  Config config;
  priocclAlgorithm_t algorithm = priocclAlgoAuto;  // auto: the library's fixed rule
  double tickSeconds = 1e-3;
};

class Simulation {
 public:
  Simulation(int ranks, const SimOptions& options);
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  int ranks() const { return fabric_.ranks(); }
  const Config& config() const { return config_; }
  SimFabric& fabric() { return fabric_; }

  // `op` enters rank `rank`'s engine at `atSeconds` (no earlier than the rank's clock then).
  // Returns the op's index for the times below.
  size_t submit(int rank, double atSeconds, std::shared_ptr<detail::OpState> op);
  // Runs until every submitted op is done. Throws InternalError when events run out first (an
  // op that can never finish: names it), or when an op failed.
  void run();
  double submittedAt(size_t op) const { return ops_[op].submitted; }
  double endedAt(size_t op) const { return ops_[op].ended; }  // < 0: not yet
  const detail::OpState& op(size_t op) const { return *ops_[op].op; }
  // The longest of these ops' times from submission to end (an op's time across ranks).
  double slowest(const std::vector<size_t>& ops) const;
  double nowSeconds() const { return static_cast<double>(fabric_.now()) * 1e-9; }
  uint64_t rounds() const { return rounds_; }
  // The highest send credit any rank's tuner has reached so far (its start where none grew).
  size_t highestCredit() const;

 private:
  struct Tracked {
    int rank;
    std::shared_ptr<detail::OpState> op;
    int64_t at;  // ns: when it is due to enter the engine
    bool entered = false;
    double submitted = -1, ended = -1;
  };
  void round(int rank);  // one rank's rounds of progress until nothing moves
  bool allEnded() const { return ended_ == ops_.size(); }

  Config config_;
  SimFabric fabric_;  // before engines_: the engines read its clock until they are gone
  int64_t tickNs_;
  std::vector<std::unique_ptr<detail::Engine>> engines_;
  std::vector<Tracked> ops_;
  std::vector<std::vector<size_t>> live_;  // per rank: tracked ops not yet ended
  size_t ended_ = 0;
  uint64_t rounds_ = 0;
};

// The ranks' buffers for one op of `count` floats, each holding 1: one per rank, or, for a fabric
// without payload (FabricSpec::payload), one that every rank shares (nothing reads it).
class RankBuffers {
 public:
  RankBuffers(int ranks, size_t count, bool payload)
      : shared_(!payload),
        data_(payload ? static_cast<size_t>(ranks) : 1, std::vector<float>(count, 1.0f)) {}
  float* of(int rank) { return data_[shared_ ? 0 : static_cast<size_t>(rank)].data(); }
  size_t count() const { return data_[0].size(); }

 private:
  bool shared_;
  std::vector<std::vector<float>> data_;
};

// An all-reduce of `count` floats in place over `data` (the test's and the workloads' op).
std::shared_ptr<detail::OpState> allReduceOp(float* data, size_t count, int priority,
                                             const std::string& name = "");

}  // namespace prioccl::sim
