#include "core/op_matcher.h"

#include "algo/agreement.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace prioccl::detail {
namespace {

std::string describeArgs(const Announce& a) {
  return concat("count ", a.count, ", ", reduce::dtypeName(static_cast<priocclDataType_t>(a.dtype)),
                ", ", reduce::opName(static_cast<priocclRedOp_t>(a.op)));
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
  a.op = enumBits(op.op);
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
  if (!d.ok)
    *mismatch =
        concat("Mismatched allreduce ", describeOp(*op, d.occurrence), ": rank ", d.rankA, " had ",
               describeArgs(d.a), ", but rank ", d.rankB, " had ", describeArgs(d.b));
  return op;
}

std::string OpMatcher::verdict(const OpState& op, const AgreementChunk& agreement) const {
  if (agreement.agreed()) return {};
  AgreementHeader h = agreement.verdict();
  std::string other = h.rankB >= 0 ? concat("rank ", h.rankB, " had ", describeArgs(h.b))
                                   : std::string("a malformed agreement message arrived");
  return concat("Mismatched allreduce ", describeOp(op, op.globalSeq - unnamedBase_), ": rank ",
                h.rankA, " had ", describeArgs(h.a), ", but ", other);
}

void OpMatcher::admit(std::shared_ptr<OpState> op, Negotiator& negotiator, Sink& sink) {
  if (op->kind != OpState::Kind::kAllReduce) {  // point to point: matched by order per lane
    if (op->count == 0) {
      sink.end(*op, priocclSuccess, "");
      return;
    }
    numberPointToPoint(*op);
    sink.join(kPointToPointLanes, std::move(op));
    return;
  }
  Announce a = number(*op);
  if (!op->named) {  // agreed among the ranks themselves, in submission order
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
    sink.end(*op, priocclInvalidUsage, mismatch);
  else if (op->count == 0)  // matched, nothing to move
    sink.end(*op, priocclSuccess, "");
  else
    sink.join(kNamedLane, std::move(op));
}

void OpMatcher::concluded(const AgreementChunk& agreement, std::shared_ptr<OpState> op,
                          Sink& sink) {
  std::shared_ptr<OpState> moves;
  sink.matched(*op);
  if (std::string mismatch = verdict(*op, agreement); !mismatch.empty()) {
    sink.end(*op, priocclInvalidUsage, mismatch);
  } else if (agreement.dataDone() || op->count == 0) {
    sink.end(*op, priocclSuccess, "");
  } else {
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
