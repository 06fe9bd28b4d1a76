// The data path over a collective backend (transports/coll_backend.h), where a chunk is one
// collective that cannot be preempted once launched and every rank must launch the same chunks in
// the same order. Preemption therefore happens between launches, in an order every rank shares:
// the coordinator plans it, most urgent chunk first among the ops decided so far, and only a few
// launches ahead of its own completions (kPlanAhead), so that an urgent op decided now goes
// before the rest of a bulk op; the plan travels to the other ranks as launch lists
// (Negotiator::broadcastLaunches). Every rank launches the plan in order, at most kInFlight at a
// time. Ops are decided through the coordinator too (the engine sends unnamed collectives there
// in this mode): a launch names its op by its place in the decisions' global order.
//
// Runs on the progress thread under the engine's lock, as the chunk runner does; errors are
// thrown (Error) and the engine fails the communicator.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "coll_backend.h"
#include "common/engine_clock.h"
#include "common/wire.h"
#include "core/op.h"
#include "core/op_stats.h"
#include "prioccl/prioccl.hpp"

namespace prioccl::detail {

class CollectiveRunner {
 public:
  using Clock = EngineClock;
  // Launches in flight per rank: one running, one queued behind it in the library, so that it
  // never idles between launches.
  static constexpr size_t kInFlight = 2;
  // How far the coordinator's plan runs ahead of its own completed launches: what an urgent op
  // may find ahead of it.
  static constexpr size_t kPlanAhead = 2;

  class Events {
   public:
    virtual ~Events() = default;
    virtual void opEnded(OpState& op) = 0;  // every launch of `op` has completed
  };

  CollectiveRunner(CollBackend& backend, const Config& config, bool coordinator, OpStats& stats,
                   Events& events);

  // The kinds a backend runs (the v-variants and point-to-point ops stay on the step machines
  // over the transport).
  static bool runs(OpState::Kind kind);
  // A decided op of a kind it runs (op.globalSeq: its place in the decisions' order) waits to be
  // planned.
  void add(std::shared_ptr<OpState> op);
  // Coordinator: extends the plan within kPlanAhead and returns the new entries (queued here
  // too), for the other ranks.
  std::vector<LaunchEntry> plan();
  // The others: the coordinator's entries, in its order.
  void follow(const std::vector<LaunchEntry>& entries);
  // Launches queued entries, in order, while fewer than kInFlight are in flight and their ops
  // are known here; true when it launched any.
  bool launch();
  // Polls the backend; finished ops go to Events::opEnded. True when any launch completed.
  bool poll(Clock::time_point now);

  bool empty() const { return ops_.empty(); }
  // Forgets every op (the backend abandoned its collectives); they go to `doomed`.
  void clear(std::vector<std::shared_ptr<OpState>>& doomed);
  // f(op, last progress) for every op not ended, for the watchdog.
  template <typename F>
  void forEachOp(F&& f) const {
    for (const auto& entry : ops_)
      if (!entry.second.op->ended) f(*entry.second.op, lastProgress_);
  }
  // For stall messages: where the op stands in the plan.
  std::string waitingFor(const OpState& op) const;

  // The launches op is cut into (the same on every rank).
  uint32_t chunksOf(const OpState& op) const;

 private:
  struct Live {
    std::shared_ptr<OpState> op;
    uint32_t chunks = 0, planned = 0, launched = 0, done = 0;
    // A reduce-scatter in place (recvbuf inside sendbuf), which MPI forbids: its input copied.
    std::vector<unsigned char> input;
  };
  CollLaunch launchOf(Live& live, uint32_t chunk);
  size_t launchElements(const Live& live) const;  // elements per launch of a sliced op

  CollBackend& backend_;
  const size_t chunkBytes_;
  const bool byPriority_;
  const bool coordinator_;
  OpStats& stats_;
  Events& events_;
  std::map<uint64_t, Live> ops_;   // by global sequence
  std::deque<LaunchEntry> queue_;  // planned, not yet launched: the same order on every rank
  struct InFlight {
    LaunchEntry entry;
    size_t bytes;
    Clock::time_point start;
  };
  std::map<uint64_t, InFlight> inFlight_;  // by cookie
  uint64_t nextCookie_ = 0;
  uint64_t planned_ = 0, completed_ = 0;  // launches planned / completed here, in all
  Clock::time_point lastProgress_ = Clock::now();
  std::vector<Completion> completions_;
};

}  // namespace prioccl::detail
