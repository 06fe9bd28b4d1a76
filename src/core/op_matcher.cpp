#include "core/op_matcher.h"

#include <algorithm>

#include "algo/agreement.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace prioccl::detail {
namespace {

static_assert(kAllToAllVWireKind == static_cast<int32_t>(OpState::Kind::kAllToAllV) &&
              kJoinWireKind == static_cast<int32_t>(OpState::Kind::kJoin));

// An op kind read off the wire, named ("op" when no kind has that value).
const char* wireKindName(int32_t kind) {
  if (kind < 0 || kind >= OpState::kKinds) return "op";
  return kindName(static_cast<OpState::Kind>(kind));
}

// An all-reduce's arguments as before kinds existed ("count 4, float32, sum"); other kinds, or
// both sides when the kinds differ, are named ("broadcast from root 1, count 4, float32").
std::string describeArgs(const Announce& a, bool withKind) {
  std::string dtype = reduce::dtypeName(static_cast<priocclDataType_t>(a.dtype));
  if (a.kind == kAllReduceKind)
    return concat(withKind ? "allreduce, " : "", "count ", a.count, ", ", dtype, ", ",
                  reduce::opName(static_cast<priocclRedOp_t>(a.op)));
  if (a.kind == kBroadcastKind)
    return concat("broadcast from root ", a.root, ", count ", a.count, ", ", dtype);
  if (a.kind == kReduceKind)
    return concat("reduce to root ", a.root, ", count ", a.count, ", ", dtype, ", ",
                  reduce::opName(static_cast<priocclRedOp_t>(a.op)));
  if (a.kind == kAllGatherKind) return concat("allgather, count ", a.count, " per rank, ", dtype);
  if (a.kind == kAllToAllKind) return concat("alltoall, count ", a.count, " per rank, ", dtype);
  if (a.kind == kBarrierKind) return "barrier";
  if (a.kind == kJoinWireKind)
    return "joined (priocclJoin: while it waits for the others, only their allreduce, reduce, "
           "reducescatter, barrier and broadcast from a rank that has not joined can run, and "
           "only named ones)";
  // The v-variants' counts differ by rank; the digest of them tells two layouts apart.
  if (a.kind == kAllGatherVKind || a.kind == kReduceScatterVKind)
    return concat(wireKindName(a.kind),
                  ", per-rank counts (and tensor shape, where given) with digest ", std::hex,
                  a.layout, std::dec, " (largest ", a.count, "), ", dtype,
                  a.kind == kReduceScatterVKind
                      ? concat(", ", reduce::opName(static_cast<priocclRedOp_t>(a.op)))
                      : std::string());
  if (a.kind == kAllToAllVWireKind) return concat("alltoallv, ", dtype);
  if (a.kind == kReduceScatterKind)
    return concat("reducescatter, count ", a.count, " per rank, ", dtype, ", ",
                  reduce::opName(static_cast<priocclRedOp_t>(a.op)));
  return concat(wireKindName(a.kind), " (kind ", a.kind, "), count ", a.count, ", ", dtype);
}

// ", tensor shape digest h" where the caller gave a shape (priocclShapeNext): the v-variants'
// layout is their counts' digest, named by describeArgs.
std::string describeShape(const Announce& a) {
  if (a.layout == 0 || a.kind == kAllGatherVKind || a.kind == kReduceScatterVKind ||
      a.kind == kAllToAllVWireKind)
    return {};
  return concat(", tensor shape digest ", std::hex, a.layout, std::dec);
}

// "rank a had ..., but rank b had ...". Where only the shapes differ, both sides say so (a side
// without one: "no shape given").
std::string describeSides(int rankA, const Announce& a, int rankB, const Announce& b) {
  bool withKind = a.kind != b.kind;
  bool shapes = !describeShape(a).empty() || !describeShape(b).empty();
  auto side = [&](const Announce& x) {
    std::string shape = describeShape(x);
    return describeArgs(x, withKind) + (shapes && shape.empty() ? ", no shape given" : shape);
  };
  return concat("rank ", rankA, " had ", side(a), ", but rank ", rankB, " had ", side(b));
}

// An all-to-all-v whose group agreed on everything but the pairing of counts: "" when every pair
// matches, else which pair differs (when one does: D and D * pairIndex(i, j) give i and j).
std::string pairingError(const Announce& group) {
  if (group.kind != kAllToAllVWireKind || group.pairDigest == 0) return {};
  auto d = static_cast<int64_t>(group.pairCount), w = static_cast<int64_t>(group.pairWhere);
  if (d != 0 && w % d == 0 && w / d > 0) {
    auto at = static_cast<uint64_t>(w / d);
    uint64_t from = at >> 32, to = at & 0xffffffffULL;
    if (from < (1ULL << 31) && to < (1ULL << 31) && from != to)
      return concat("rank ", from, " sends rank ", to, " ", d > 0 ? d : -d,
                    d > 0 ? " more" : " fewer", " elements than rank ", to, "'s recvcounts[", from,
                    "] expects");
  }
  return "the ranks' sendcounts and recvcounts do not pair up (what rank i sends rank j must be "
         "what rank j expects from rank i; several pairs differ)";
}

}  // namespace

uint64_t keyHash(const OpState& op) {
  if (!op.named) return 0;
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : op.key) h = (h ^ c) * 1099511628211ULL;
  return h | 1;  // never 0
}

std::string describeOp(const OpState& op, uint64_t occurrence) {
  if (op.kind == OpState::Kind::kSend)
    return concat("send to rank ", op.peer, " (tag ", op.tag, ", count ", op.count, ")");
  if (op.kind == OpState::Kind::kRecv)
    return concat("receive from rank ", op.peer, " (tag ", op.tag, ", count ", op.count, ")");
  if (op.named) return concat("'", op.key, "' (occurrence ", occurrence, ")");
  return concat("#", occurrence, " (unnamed, matched by submission order)");
}

Announce OpMatcher::arguments(const OpState& op) {
  Announce a;
  a.key = keyHash(op);
  a.count = op.count;
  a.dtype = enumBits(op.dtype);
  OpState::Kind base = op.baseKind();
  bool reduces = base == OpState::Kind::kAllReduce || base == OpState::Kind::kReduce ||
                 base == OpState::Kind::kReduceScatter;
  a.op = reduces ? enumBits(op.op) : 0;
  a.kind = static_cast<int32_t>(op.kind);
  a.root = op.root;
  a.layout = op.layout;
  a.pairDigest = op.pairDigest;
  a.pairCount = op.pairCount;
  a.pairWhere = op.pairWhere;
  a.occurrence = op.named ? op.occurrence : op.globalSeq;
  return a;
}

Announce OpMatcher::number(OpState& op) {
  if (!op.named) {
    op.globalSeq = unnamedOps_++;
    op.occurrence = op.globalSeq - unnamedBase_;
    return arguments(op);
  }
  Announce a = arguments(op);  // hashes the key once
  a.occurrence = op.occurrence = occurrences_[a.key]++;
  return a;
}

void OpMatcher::numberPointToPoint(OpState& op) {
  op.globalSeq = kPointToPointSeqBase + pointToPoint_++;
}

void OpMatcher::awaitDecision(std::shared_ptr<OpState> op, const Announce& a) {
  waiting_.emplace(Identity{a.key, a.occurrence}, std::move(op));
}

std::shared_ptr<OpState> OpMatcher::decided(const Decision& d, std::string* mismatch) {
  auto it = waiting_.find({d.key, d.occurrence});
  if (it == waiting_.end())
    fail(priocclRemoteError, "decision for an op this rank never submitted (key ", d.key,
         ", occurrence ", d.occurrence, ")");
  std::shared_ptr<OpState> op = std::move(it->second);
  waiting_.erase(it);
  op->globalSeq = decided_++;
  mismatch->clear();
  // Unnamed ops (decided here when every op is: coordinateAll) by their application number.
  const uint64_t shown = op->named ? d.occurrence : op->occurrence;
  if (!d.ok)
    // Named by the first side's kind: every rank gives the same message.
    *mismatch = concat("Mismatched ", wireKindName(d.a.kind), " ", describeOp(*op, shown), ": ",
                       describeSides(d.rankA, d.a, d.rankB, d.b));
  else if (std::string pairs = pairingError(d.a); !pairs.empty())
    *mismatch = concat("Mismatched alltoallv ", describeOp(*op, shown), ": ", pairs);
  else
    settle(*op, d.a);
  return op;
}

void OpMatcher::settle(OpState& op, const Announce& group) {
  if (op.kind == OpState::Kind::kAllToAllV) op.count = group.count;  // the group's largest block
  if (op.kind == OpState::Kind::kJoin) op.root = group.root;         // the last rank to join
}

void OpMatcher::adopt(const Decision& d, std::shared_ptr<OpState> standIn) {
  uint64_t& next = occurrences_[d.key];
  next = std::max(next, d.occurrence + 1);
  if (!standIn) {  // nothing to run, but its place in the global order is taken, as elsewhere
    ++decided_;
    return;
  }
  standIn->occurrence = d.occurrence;
  waiting_.emplace(Identity{d.key, d.occurrence}, std::move(standIn));
}

std::string OpMatcher::verdict(const OpState& op, const AgreementChunk& agreement) const {
  AgreementHeader h = agreement.verdict();
  if (agreement.agreed()) {
    std::string pairs = pairingError(h.a);
    return pairs.empty() ? pairs
                         : concat("Mismatched alltoallv ",
                                  describeOp(op, op.globalSeq - unnamedBase_), ": ", pairs);
  }
  std::string sides = h.rankB >= 0 ? describeSides(h.rankA, h.a, h.rankB, h.b)
                                   : concat("rank ", h.rankA, " had ", describeArgs(h.a, false),
                                            ", but a malformed agreement message arrived");
  return concat("Mismatched ", wireKindName(h.a.kind), " ",
                describeOp(op, op.globalSeq - unnamedBase_), ": ", sides);
}

void OpMatcher::admit(std::shared_ptr<OpState> op, Negotiator& negotiator, Sink& sink) {
  if (op->pointToPoint()) {  // matched by order per lane
    if (op->count == 0) {
      sink.endOp(*op, priocclSuccess, "");
      return;
    }
    numberPointToPoint(*op);
    sink.join(kPointToPointLanes, std::move(op));
    return;
  }
  Announce a = number(*op);
  if (!op->named && !coordinateAll_) {  // agreed among the ranks themselves, in submission order
    sink.join(kAgreeLane, std::move(op));
    return;
  }
  awaitDecision(std::move(op), a);
  negotiator.submit(a);
}

void OpMatcher::apply(const Decision& d, Sink& sink) {
  std::string mismatch;
  std::shared_ptr<OpState> op = decided(d, &mismatch);
  sink.matched(*op);
  if (!mismatch.empty())
    sink.endOp(*op, priocclInvalidUsage, mismatch);
  else if (op->count == 0)  // matched, nothing to move
    sink.endOp(*op, priocclSuccess, "");
  else
    sink.join(kNamedLane, std::move(op));
}

void OpMatcher::concluded(const AgreementChunk& agreement, std::shared_ptr<OpState> op,
                          Sink& sink) {
  std::shared_ptr<OpState> moves;
  sink.matched(*op);
  if (std::string mismatch = verdict(*op, agreement); !mismatch.empty()) {
    sink.endOp(*op, priocclInvalidUsage, mismatch);
  } else {
    settle(*op, agreement.verdict().a);
    if (agreement.dataDone() || op->count == 0)
      sink.endOp(*op, priocclSuccess, "");
    else
      moves = op;
  }
  agreementEnded(op->globalSeq, std::move(moves), [&](std::shared_ptr<OpState> joins) {
    sink.join(kUnnamedLane, std::move(joins));
  });
}

void OpMatcher::clear(std::vector<std::shared_ptr<OpState>>& doomed) {
  for (auto& entry : waiting_) doomed.push_back(std::move(entry.second));
  for (auto& entry : agreed_)
    if (entry.second) doomed.push_back(std::move(entry.second));
  waiting_.clear();
  agreed_.clear();
}

}  // namespace prioccl::detail
