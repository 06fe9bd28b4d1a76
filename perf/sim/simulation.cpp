#include "simulation.h"

#include <algorithm>
#include <cmath>

#include "algo/host_layout.h"
#include "common/error.h"

namespace prioccl::sim {

using detail::concat;
namespace {

// Rounds one rank runs for one event before it must have gone quiet: an engine that keeps moving
// longer is spinning on something no event will change (a bug worth a loud stop).
constexpr int kMaxRounds = 100000;

int64_t toNs(double seconds) {
  return std::llround(seconds * 1e9);
}

Config resolved(Config c, const FabricSpec& f, int ranks) {
  c.timeoutSeconds = 0;  // no peer is lost in a simulation, and no transport call sticks
  c.stallWarnSeconds = 0;
  c.calibrate = false;
  c.resolveAuto(f.bitsPerSecond / 8, f.latencySeconds, ranks);
  return c;
}

}  // namespace

Simulation::Simulation(int ranks, const SimOptions& options)
    : config_(resolved(options.config, options.fabric, ranks)),
      fabric_(ranks, options.fabric),
      tickNs_(std::max<int64_t>(1, toNs(options.tickSeconds))),
      live_(static_cast<size_t>(ranks)) {
  // Which ranks share a host, as a communicator learns it (one key per host), and the two
  // levels' links as it would measure them: a rank's share of its host's NIC between hosts.
  std::vector<std::string> keys;
  for (int r = 0; r < ranks; ++r) keys.push_back(concat("host", fabric_.hostOf(r)));
  auto hosts = std::make_shared<const HostLayout>(HostLayout::fromKeys(keys));
  AlgoSelector selector(options.algorithm);
  selector.setLink(config_.linkBytesPerSecond, ranks);
  if (hosts->twoLevel()) {
    const FabricSpec& f = options.fabric;
    HostLevels levels;
    levels.hosts = hosts->hosts();
    levels.shards = hosts->fewestPerHost();
    levels.most = hosts->mostPerHost();
    levels.intraBytesPerSecond = f.intraBitsPerSecond / 8;
    levels.intraLatencySeconds = f.intraLatencySeconds;
    levels.interBytesPerSecond = f.bitsPerSecond * f.wireEfficiency / 8 / levels.most;
    levels.interLatencySeconds = f.latencySeconds;
    selector.setLevels(levels);
  }
  engines_.reserve(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    engines_.push_back(std::make_unique<detail::Engine>(
        std::make_unique<SimTransport>(fabric_, r), config_, selector,
        std::make_shared<detail::ErrorLog>(), /*heartbeats=*/false, detail::TimelineClock{},
        nullptr, hosts, detail::Engine::Progress::kCallerSteps));
  // As at a communicator's creation: counters and unnamed op numbers start from here.
  for (auto& e : engines_) e->startApplication();
}

size_t Simulation::submit(int rank, double atSeconds, std::shared_ptr<detail::OpState> op) {
  if (rank < 0 || rank >= ranks())
    throw InvalidArgument(concat("sim: submit on rank ", rank, " of ", ranks()));
  const int64_t at = std::max(fabric_.now(), toNs(atSeconds));
  ops_.push_back(Tracked{rank, std::move(op), at});
  live_[rank].push_back(ops_.size() - 1);
  fabric_.wakeAt(rank, at);
  return ops_.size() - 1;
}

void Simulation::round(int r) {
  const int64_t start = fabric_.beginRound(r);
  if (start > fabric_.now()) {  // its CPU is still busy with an earlier round
    fabric_.endRound(r);
    fabric_.wakeAt(r, start);
    return;
  }
  detail::Engine& engine = *engines_[r];
  for (size_t i : live_[r]) {
    Tracked& t = ops_[i];
    if (t.entered || t.at > start) continue;
    t.entered = true;
    t.submitted = static_cast<double>(start) * 1e-9;
    engine.submit(t.op);
  }
  bool idle = false;
  int n = 0;
  while (engine.stepOnce(&idle)) {
    ++rounds_;
    if (++n > kMaxRounds)
      throw InternalError(concat("sim: rank ", r, "'s engine kept moving for ", kMaxRounds,
                                 " rounds at t=", fabric_.rankTime(r), " ns"));
  }
  ++rounds_;
  const int64_t end = fabric_.endRound(r);
  auto& live = live_[r];
  for (auto it = live.begin(); it != live.end();) {
    Tracked& t = ops_[*it];
    if (!t.entered || !t.op->done.load(std::memory_order_acquire)) {
      ++it;
      continue;
    }
    if (t.op->result != priocclSuccess)
      throw InternalError(concat("sim: op ", *it, " on rank ", r, " failed: ", t.op->error));
    t.ended = static_cast<double>(end) * 1e-9;
    ++ended_;
    it = live.erase(it);
  }
  // The rules that act on time alone need a round now and then while ops are in flight; an op
  // due later needs its own.
  for (size_t i : live) {
    const Tracked& t = ops_[i];
    if (!t.entered) fabric_.wakeAt(r, t.at);
  }
  if (!idle) fabric_.wakeAt(r, std::max(end, fabric_.now()) + tickNs_);
}

size_t Simulation::highestCredit() const {
  size_t most = 0;
  for (const auto& e : engines_) most = std::max(most, e->highestSendCredit());
  return most;
}

double Simulation::slowest(const std::vector<size_t>& ops) const {
  double t = 0;
  for (size_t i : ops) t = std::max(t, endedAt(i) - submittedAt(i));
  return t;
}

void Simulation::run() {
  std::vector<int> due;
  while (!allEnded()) {
    if (fabric_.empty()) {
      std::string open;
      for (size_t i = 0; i < ops_.size() && open.size() < 400; ++i)
        if (ops_[i].ended < 0) open += concat(" op ", i, " (rank ", ops_[i].rank, ")");
      throw InternalError(concat("sim: nothing left to happen at t=", nowSeconds(),
                                 " s, and these have not ended:", open));
    }
    due.clear();
    fabric_.advance(due);
    std::sort(due.begin(), due.end());
    due.erase(std::unique(due.begin(), due.end()), due.end());
    for (int r : due) round(r);
  }
}

std::shared_ptr<detail::OpState> allReduceOp(float* data, size_t count, int priority,
                                             const std::string& name) {
  auto op = std::make_shared<detail::OpState>();
  op->send = data;
  op->recv = data;
  op->count = count;
  op->dtype = priocclFloat32;
  op->op = priocclSum;
  op->priority = priority;
  op->errorLog = std::make_shared<detail::ErrorLog>();
  if (!name.empty()) {
    op->named = true;
    op->key = name;
  }
  return op;
}

}  // namespace prioccl::sim
