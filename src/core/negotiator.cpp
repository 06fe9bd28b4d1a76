// The coordinator protocol; see negotiator.h.
#include "core/negotiator.h"

#include "common/error.h"

namespace prioccl::detail {

std::vector<int> Negotiator::controlPeers(int rank, int nranks) {
  std::vector<int> peers;
  if (rank == kCoordinator) {
    for (int r = 0; r < nranks; ++r)
      if (r != kCoordinator) peers.push_back(r);
  } else {
    peers.push_back(kCoordinator);
  }
  return peers;
}

void Negotiator::submit(const Announce& a) {
  if (rank_ == kCoordinator)
    record(rank_, a);
  else
    announces_.push_back(a);
}

void Negotiator::record(int rank, const Announce& a) {
  Pending& p = pending_[{a.key, a.occurrence}];
  if (p.reportedBy.empty()) p.reportedBy.assign(nranks_, false);
  if (p.reportedBy[rank])
    fail(priocclRemoteError, "rank ", rank, " announced op (key ", a.key, ", occurrence ",
         a.occurrence, ") twice: a corrupted or foreign control message");
  p.reportedBy[rank] = true;
  if (p.reported == 0) {
    p.firstRank = rank;
    p.first = a;
  } else if (!p.mismatch && !combineArguments(&p.first, a)) {
    p.mismatch = true;
    p.otherRank = rank;
    p.other = a;
  }
  if (++p.reported < nranks_) return;
  Decision d;
  d.key = a.key;
  d.occurrence = a.occurrence;
  d.ok = p.mismatch ? 0 : 1;
  d.rankA = p.firstRank;
  d.a = p.first;
  d.rankB = p.otherRank;
  d.b = p.other;
  pending_.erase({a.key, a.occurrence});
  decided_.push_back(d);
  if (nranks_ > 1) broadcast_.push_back(d);
}

std::vector<int> Negotiator::missingRanks(uint64_t key, uint64_t occurrence) const {
  std::vector<int> missing;
  auto it = pending_.find({key, occurrence});
  if (it == pending_.end()) return missing;
  for (int r = 0; r < nranks_; ++r)
    if (!it->second.reportedBy[r]) missing.push_back(r);
  return missing;
}

ControlKind Negotiator::onMessage(int from, const unsigned char* buf, size_t bytes,
                                  AbortNotice* abort) {
  ControlKind kind;
  std::vector<Announce> announces;
  std::vector<Decision> decisions;
  std::string error;
  if (from < 0 || from >= nranks_ || from == rank_)
    fail(priocclInternalError, "control message from rank ", from, " of ", nranks_);
  if (!decodeControl(buf, bytes, &kind, &announces, &decisions, &error, abort))
    fail(priocclRemoteError, "bad control message from rank ", from, ": ", error);
  if (kind == ControlKind::kHeartbeat || kind == ControlKind::kGoodbye ||
      kind == ControlKind::kAbort)
    return kind;
  if (rank_ == kCoordinator && kind == ControlKind::kAnnounce) {
    for (const Announce& a : announces) record(from, a);
  } else if (rank_ != kCoordinator && from == kCoordinator && kind == ControlKind::kDecision) {
    decided_.insert(decided_.end(), decisions.begin(), decisions.end());
  } else {
    fail(priocclRemoteError, "unexpected control message of kind ", static_cast<int>(kind),
         " from rank ", from);
  }
  return kind;
}

std::vector<Negotiator::Outgoing> Negotiator::takeOutgoing() {
  for (size_t i = 0; i < announces_.size(); i += kAnnouncesPerMessage) {
    size_t n = std::min(kAnnouncesPerMessage, announces_.size() - i);
    out_.push_back({kCoordinator, encodeAnnounces(announces_.data() + i, n)});
  }
  announces_.clear();
  for (size_t i = 0; i < broadcast_.size(); i += kDecisionsPerMessage) {
    size_t n = std::min(kDecisionsPerMessage, broadcast_.size() - i);
    std::vector<unsigned char> msg = encodeDecisions(broadcast_.data() + i, n);
    for (int r = 0; r < nranks_; ++r)
      if (r != kCoordinator) out_.push_back({r, msg});
  }
  broadcast_.clear();
  std::vector<Outgoing> out;
  out.swap(out_);
  return out;
}

std::vector<Decision> Negotiator::takeDecisions() {
  std::vector<Decision> d;
  d.swap(decided_);
  return d;
}

}  // namespace prioccl::detail
