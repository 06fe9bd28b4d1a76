// Op identity across ranks: ranks submit the same ops at different moments and, with keys, in
// different orders. Every op is announced to a coordinator (rank 0), which decides it once every
// rank has announced it, checks that they agree on count, datatype and reduction op, and
// broadcasts its decisions in one order. That order is the op's global sequence on every rank,
// so chunk identities (and the engine's window) stay consistent, and a mismatched op is failed
// everywhere before any of its data moves, leaving other ops untouched.
//
// Joins (priocclJoin, Horovod's join): a rank that ran out of work announces a join and takes part
// in the others' ops without announcing them. The coordinator counts a joined rank as having
// announced every op, decides an op once every rank has announced or joined, and says in the
// decision how many ranks were filled in; the joined ranks run stand-ins (the op's identity
// element as their data). Only ops a rank can take part in without data of its own are answered
// so (all-reduce, reduce, reduce-scatter, a broadcast from a rank that has not joined, barrier);
// the others fail everywhere, naming the joined rank. The join itself is decided once every rank
// has joined, with the last one to join in its decision.
//
// Ops decided before with the same signature are announced and decided by response-cache slot
// (response_cache.h): 16 bytes an op instead of 72 in and 176 out per rank at the coordinator.
//
// Pure logic: messages go out and come in as byte buffers; the engine carries them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "common/wire.h"
#include "core/response_cache.h"

namespace prioccl::detail {

class Negotiator {
 public:
  // cacheCapacity: response-cache slots (PRIOCCL_CACHE_CAPACITY, the same on every rank); 0: off.
  Negotiator(int rank, int nranks, size_t cacheCapacity = 0)
      : rank_(rank), nranks_(nranks), cache_(cacheCapacity) {}

  static constexpr int kCoordinator = 0;
  // Peers this rank receives control messages from: rank 0 hears from every rank, the others
  // from rank 0.
  static std::vector<int> controlPeers(int rank, int nranks);

  // A local op entered the negotiation.
  void submit(const Announce& a);
  // A control message arrived from `from`; throws Error on a malformed or unexpected message.
  // Returns its kind: announces and decisions are handled here, the liveness kinds are the
  // caller's (an abort's content goes to `abort` when given).
  ControlKind onMessage(int from, const unsigned char* buf, size_t bytes,
                        AbortNotice* abort = nullptr);

  struct Outgoing {
    int peer;
    std::vector<unsigned char> bytes;  // exactly kControlBytes
  };
  // Messages to send now.
  std::vector<Outgoing> takeOutgoing();
  // Decisions in global order (the same order on every rank).
  std::vector<Decision> takeDecisions();
  // A collective backend's launch order (collective_runner.h): the coordinator broadcasts what it
  // planned (after the decisions it refers to); the others take what arrived, in order.
  void broadcastLaunches(const std::vector<LaunchEntry>& entries);
  std::vector<LaunchEntry> takeLaunches();

  // What this rank's negotiation has sent and received so far (control messages of announcements
  // and decisions, headers included).
  struct Traffic {
    uint64_t announcedFull = 0, announcedCached = 0;  // entries sent (others) / received (rank 0)
    uint64_t decidedFull = 0, decidedCached = 0;      // entries sent (rank 0) / received (others)
    uint64_t bytesIn = 0, bytesOut = 0;
  };
  const Traffic& traffic() const { return traffic_; }
  size_t cachedSignatures() const { return cache_.size(); }

  // Coordinator only: ops some ranks have announced and others not (for stall reports).
  size_t undecided() const { return pending_.size(); }
  // Coordinator only: the ranks that have not yet announced (key, occurrence); empty when the
  // op is unknown here or decided.
  std::vector<int> missingRanks(uint64_t key, uint64_t occurrence) const;

 private:
  struct Pending;
  using Identity = std::pair<uint64_t, uint64_t>;  // (key, occurrence)
  void record(int rank, const Announce& a);        // coordinator
  // Coordinator: every rank has announced the op or joined.
  bool complete(const Pending& p) const;
  void decide(const Pending& p, uint64_t key, uint64_t occurrence);
  // Coordinator, after a rank joined: decides the ops now complete.
  void decideCompleted();
  // Others: a full decision from the coordinator (its signature may be learnt).
  void decided(const Decision& d);
  // The signature a by-slot entry from `from` stands for; throws when no such slot exists.
  Announce bySlot(const CachedEntry& e, int from) const;

  struct Pending {
    int reported = 0;
    std::vector<bool> reportedBy;
    int firstRank = -1;
    Announce first{};  // the first announcement, combined with every later one that agrees
    bool mismatch = false;
    int otherRank = -1;
    Announce other{};
  };

  int rank_, nranks_;
  ResponseCache cache_;
  Traffic traffic_;
  // Not yet sent to the coordinator, in submission order; each with its response-cache slot
  // (ResponseCache::kNone: in full).
  std::vector<Announce> announces_;
  std::vector<uint32_t> announceSlots_;
  std::vector<Decision> broadcast_;  // coordinator: decided, not yet sent; with their slots
  std::vector<uint32_t> broadcastSlots_;
  std::vector<Decision> decided_;         // ready for the engine
  std::vector<LaunchEntry> launchesOut_;  // coordinator: planned, not yet sent
  std::vector<LaunchEntry> launchesIn_;   // others: arrived, not yet taken
  std::map<Identity, Pending> pending_;   // coordinator, by (key, occurrence)
  std::vector<Outgoing> out_;
  // Coordinator: ranks that joined and wait for the others (all false outside a join).
  std::vector<bool> joined_;
  int joinedCount_ = 0, lastJoined_ = -1;
};

}  // namespace prioccl::detail
