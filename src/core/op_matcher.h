// Which op is which across ranks, and when each may join its lane. Ranks submit the same ops at
// different moments and, with keys, in different orders:
// - named ops are matched by (key, occurrence): each waits here until the coordinator's decision
//   (negotiator.h) gives it its place in the named lane's global order;
// - unnamed ops are numbered in submission order; their agreement chunk checks the arguments
//   (agreement.h), and those with data left to move join the unnamed data lane in that order,
//   whatever order their agreements ended in;
// - point-to-point ops are numbered apart (for the timeline) and matched by order per lane.
// A mismatch fails the op on every rank with the same message, naming both sides.
// Matched ops leave through a Sink into their lanes (admit, apply, concluded); the engine
// connects the sink to the chunk runner and needs no lane or agreement rule of its own.
//
// Pure bookkeeping: no transport, no threads (the engine's progress lock guards it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/wire.h"
#include "core/lane_table.h"
#include "core/negotiator.h"
#include "core/op.h"

namespace prioccl::detail {

class AgreementChunk;

// Point-to-point ops' numbers start here, apart from collectives'.
inline constexpr uint64_t kPointToPointSeqBase = uint64_t{1} << 62;

// Named ops hash their key; unnamed ops all share key 0 and match by submission order.
uint64_t keyHash(const OpState& op);
// For messages: "'key' (occurrence n)", "#n (unnamed, ...)", "send to rank r (tag t, ...)".
std::string describeOp(const OpState& op, uint64_t occurrence);

class OpMatcher {
 public:
  // Where ops leave to.
  class Sink {
   public:
    virtual ~Sink() = default;
    // `op` joins `lane`: kNamedLane, kAgreeLane, kUnnamedLane, or for a point-to-point op
    // kPointToPointLanes (its own lane, by peer, direction and tag).
    virtual void join(uint32_t lane, std::shared_ptr<OpState> op) = 0;
    virtual void matched(const OpState& op) = 0;  // every rank agrees on its identity now
    // The op ends here: a mismatch, or nothing to move.
    virtual void endOp(OpState& op, priocclResult_t code, const std::string& message) = 0;
  };

  // A submitted op (a collective's algorithm settled) takes its way: a point-to-point op joins
  // its lane at once, an unnamed collective the agreement lane, and a named one is announced to
  // `negotiator` and waits for the coordinator's decision (even with nothing to move: a rank with
  // count 0 where the others have data must fail everywhere, not leave them waiting).
  void admit(std::shared_ptr<OpState> op, Negotiator& negotiator, Sink& sink);
  // The coordinator's decision on a named op: it joins the named lane in the global order, or
  // ends (mismatch, count 0).
  void apply(const Decision& d, Sink& sink);
  // An unnamed op's agreement chunk finished (on the lanes or inline): the op ends when the ranks
  // disagreed or nothing is left to move (the agreement carried its data), else joins the unnamed
  // data lane, in submission order.
  void concluded(const AgreementChunk& agreement, std::shared_ptr<OpState> op, Sink& sink);

  // The arguments every rank checks (agreement, negotiator); for an unnamed op with its number.
  static Announce arguments(const OpState& op);
  // Numbers a collective op (unnamed: in submission order; named: among ops with its key) and
  // returns what every rank checks.
  Announce number(OpState& op);
  void numberPointToPoint(OpState& op);  // apart from collectives
  // The number the next unnamed op gets, as messages show it.
  uint64_t nextUnnamed() const { return unnamedOps_ - unnamedBase_; }
  // The communicator's own ops end here: unnamed ops are numbered from here on in messages.
  void startApplication() { unnamedBase_ = unnamedOps_; }
  // Every collective goes to the coordinator, unnamed ones too (numbered in submission order
  // under key 0): a collective backend launches in one global order (collective_runner.h).
  void coordinateAll() { coordinateAll_ = true; }

  // A named op, numbered (`a`: what number() returned), waits for the coordinator's decision.
  void awaitDecision(std::shared_ptr<OpState> op, const Announce& a);
  bool awaitingDecision(const OpState& op) const {
    return (op.named || coordinateAll_) && waiting_.count(announced(op)) != 0;
  }
  // The (key hash, occurrence) an op awaiting its decision was announced with.
  static std::pair<uint64_t, uint64_t> announced(const OpState& op) {
    return {keyHash(op), op.named ? op.occurrence : op.globalSeq};
  }
  // The coordinator decided an op: it leaves, with its place in the global order. `mismatch`:
  // set to the message every rank gives when the ranks disagreed. Throws when this rank never
  // submitted it.
  std::shared_ptr<OpState> decided(const Decision& d, std::string* mismatch);

  // Whether this rank submitted the decided op (and waits for the decision).
  bool awaits(const Decision& d) const { return waiting_.count({d.key, d.occurrence}) != 0; }
  // A joined rank (priocclJoin) takes part in an op it never submitted: later ops with its key
  // are numbered after it, as on the ranks that submitted it, and `standIn` (null when the op
  // failed: nothing to run, though it takes its place in the global order) waits for the
  // decision in its place.
  void adopt(const Decision& d, std::shared_ptr<OpState> standIn);

  // An agreed op takes what only the group knows: an all-to-all-v's count (its largest block), a
  // join's last rank to join.
  static void settle(OpState& op, const Announce& group);
  // An unnamed op's agreement ended: "" when the ranks agreed, else the message every rank gives.
  std::string verdict(const OpState& op, const AgreementChunk& agreement) const;
  // ... and its turn in the unnamed data lane: `moves` is the op if it has data left to move.
  // Calls join(op) for every op whose turn has come, in submission order.
  template <typename Join>
  void agreementEnded(uint64_t seq, std::shared_ptr<OpState> moves, Join&& join) {
    if (agreed_.empty() && seq == nextUnnamedData_) {  // in order: no map entry needed
      ++nextUnnamedData_;
      if (moves) join(std::move(moves));
      return;
    }
    agreed_.emplace(seq, std::move(moves));
    for (auto it = agreed_.begin(); it != agreed_.end() && it->first == nextUnnamedData_;
         it = agreed_.erase(it), ++nextUnnamedData_) {
      if (it->second) join(std::move(it->second));
    }
  }

  bool empty() const { return waiting_.empty() && agreed_.empty(); }
  // f(op, agreed): ops awaiting the coordinator's decision (false), or agreed unnamed ops
  // awaiting their turn in the unnamed data lane (true).
  template <typename F>
  void forEachWaiting(F&& f) const {
    for (const auto& entry : waiting_) f(*entry.second, false);
    for (const auto& entry : agreed_)
      if (entry.second) f(*entry.second, true);
  }
  // Forgets every op; those still held go to `doomed`.
  void clear(std::vector<std::shared_ptr<OpState>>& doomed);

 private:
  using Identity = std::pair<uint64_t, uint64_t>;  // (key hash, occurrence)
  std::map<uint64_t, uint64_t> occurrences_;       // per key hash: named ops submitted so far
  std::map<Identity, std::shared_ptr<OpState>> waiting_;  // named ops awaiting their decision
  uint64_t decided_ = 0;                                  // named ops decided so far
  uint64_t pointToPoint_ = 0;                             // point-to-point ops submitted so far
  uint64_t unnamedOps_ = 0;                               // unnamed ops submitted so far
  uint64_t unnamedBase_ = 0;                              // ... of which the communicator's own
  // Unnamed ops whose agreement ended, by sequence, until their turn in the unnamed data lane
  // (null: nothing left to move).
  std::map<uint64_t, std::shared_ptr<OpState>> agreed_;
  uint64_t nextUnnamedData_ = 0;
  bool coordinateAll_ = false;
};

}  // namespace prioccl::detail
