// Whether the thread that holds the engine's progress lock is stuck in one round: a transport
// call that never returns must not hang the threads that wait for it too. (Open MPI's
// shared-memory transport can spin forever in MPI_Testsome when a peer dies half-way through
// writing into its queue.) The round's holder marks the round and the transport call it is in;
// a waiter that cannot take the lock watches the mark (Engine::lockUnlessStuck).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace prioccl::detail {

class RoundWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // The lock holder, around each round (two relaxed increments: odd while inside).
  void enter() { ticket_.fetch_add(1, std::memory_order_relaxed); }
  void leave() { ticket_.fetch_add(1, std::memory_order_relaxed); }
  // The transport call the round is in now (a string literal), or null between calls.
  void call(const char* name) { call_.store(name, std::memory_order_relaxed); }
  const char* currentCall() const { return call_.load(std::memory_order_relaxed); }
  uint64_t ticket() const { return ticket_.load(std::memory_order_relaxed); }

  // enter() and leave() around a scope.
  class Round {
   public:
    explicit Round(RoundWatch& watch) : watch_(watch) { watch_.enter(); }
    ~Round() { watch_.leave(); }
    Round(const Round&) = delete;
    Round& operator=(const Round&) = delete;

   private:
    RoundWatch& watch_;
  };

  // One waiter's view: how long the same round has been running, as far as it has watched.
  class Observer {
   public:
    // Zero while no round runs or the round changed since the last look.
    Clock::duration stuckFor(const RoundWatch& watch, Clock::time_point now) {
      uint64_t t = watch.ticket();
      if ((t & 1) == 0 || t != seen_) {
        seen_ = t;
        since_ = now;
        return Clock::duration::zero();
      }
      return now - since_;
    }
    uint64_t ticket() const { return seen_; }

   private:
    uint64_t seen_ = 0;
    Clock::time_point since_;
  };

 private:
  std::atomic<uint64_t> ticket_{0};
  std::atomic<const char*> call_{nullptr};
};

}  // namespace prioccl::detail
