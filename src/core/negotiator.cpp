// The coordinator protocol; see negotiator.h.
#include "core/negotiator.h"

#include "common/error.h"
#include "core/op.h"

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
  if (rank_ == kCoordinator) {
    record(rank_, a);
  } else {
    announces_.push_back(a);
    announceSlots_.push_back(cache_.find(a));
  }
}

namespace {

// Whether a joined rank can take part in the op with no data of its own: it contributes the
// reduction's identity, or only receives. A rooted op's root must have data.
bool answerable(const Announce& a, const std::vector<bool>& joined) {
  bool rooted = a.kind == kBroadcastKind || a.kind == kReduceKind;
  if (rooted && (a.root < 0 || a.root >= static_cast<int>(joined.size()) || joined[a.root]))
    return false;
  return a.kind == kAllReduceKind || a.kind == kReduceScatterKind || a.kind == kBarrierKind ||
         rooted;
}

}  // namespace

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
  ++p.reported;
  if (a.kind != kJoinWireKind) {
    if (complete(p)) decide(p, a.key, a.occurrence);  // erases p
    return;
  }
  if (joined_.empty()) joined_.assign(nranks_, false);
  if (!joined_[rank]) ++joinedCount_;
  joined_[rank] = true;
  lastJoined_ = rank;
  // The ops this rank's join completes go first: the join's decision ends the join.
  decideCompleted();
  if (complete(p)) decide(p, a.key, a.occurrence);
}

bool Negotiator::complete(const Pending& p) const {
  if (p.reported == nranks_) return true;
  if (joinedCount_ == 0 || p.first.kind == kJoinWireKind) return false;
  int filled = 0;
  for (int r = 0; r < nranks_; ++r) filled += joined_[r] && !p.reportedBy[r];
  return p.reported + filled == nranks_;
}

void Negotiator::decide(const Pending& p, uint64_t key, uint64_t occurrence) {
  Decision d;
  d.key = key;
  d.occurrence = occurrence;
  d.ok = p.mismatch ? 0 : 1;
  d.rankA = p.firstRank;
  d.a = p.first;
  d.rankB = p.otherRank;
  d.b = p.other;
  d.filled = static_cast<uint32_t>(nranks_ - p.reported);
  if (d.filled > 0 && d.ok && !answerable(d.a, joined_)) {
    // A joined rank cannot take part: the op fails everywhere, naming the first such rank.
    d.ok = 0;
    for (int r = 0; r < nranks_ && d.rankB < 0; ++r)
      if (joined_[r] && !p.reportedBy[r]) d.rankB = r;
    d.b = Announce{};
    d.b.key = key;
    d.b.occurrence = occurrence;
    d.b.kind = kJoinWireKind;
  }
  if (d.a.kind == kJoinWireKind && d.ok) {  // every rank joined: the join ends
    d.a.root = lastJoined_;
    joined_.assign(joined_.size(), false);
    joinedCount_ = 0;
    lastJoined_ = -1;
  }
  pending_.erase({key, occurrence});  // p dies here
  decided_.push_back(d);
  // A signature decided before goes out by slot; a new one in full, and every rank learns it
  // from that decision, in this order.
  uint32_t slot = ResponseCache::cacheable(d) ? cache_.find(d.a) : ResponseCache::kNone;
  if (slot == ResponseCache::kNone) cache_.learn(d);
  if (nranks_ > 1) {
    broadcast_.push_back(d);
    broadcastSlots_.push_back(slot);
  }
}

Announce Negotiator::bySlot(const CachedEntry& e, int from) const {
  Announce a;
  if (!cache_.announce(e.slot, e.occurrence, &a))
    fail(priocclRemoteError, "rank ", from, " named response-cache slot ", e.slot, ", but rank ",
         rank_, " has ", cache_.size(), ": a corrupted or foreign control message");
  return a;
}

void Negotiator::decided(const Decision& d) {
  cache_.learn(d);
  decided_.push_back(d);
}

void Negotiator::decideCompleted() {
  std::vector<Identity> done;
  for (const auto& [id, p] : pending_)
    if (p.first.kind != kJoinWireKind && complete(p)) done.push_back(id);
  for (const Identity& id : done) decide(pending_.at(id), id.first, id.second);
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
  std::vector<LaunchEntry> launches;
  std::vector<CachedEntry> cached;
  std::string error;
  if (from < 0 || from >= nranks_ || from == rank_)
    fail(priocclInternalError, "control message from rank ", from, " of ", nranks_);
  if (!decodeControl(buf, bytes, &kind, &announces, &decisions, &error, abort, &launches, &cached))
    fail(priocclRemoteError, "bad control message from rank ", from, ": ", error);
  if (kind == ControlKind::kHeartbeat || kind == ControlKind::kGoodbye ||
      kind == ControlKind::kAbort)
    return kind;
  if (kind != ControlKind::kLaunch) traffic_.bytesIn += bytes;
  if (rank_ == kCoordinator && kind == ControlKind::kAnnounce) {
    traffic_.announcedFull += announces.size();
    for (const Announce& a : announces) record(from, a);
  } else if (rank_ == kCoordinator && kind == ControlKind::kAnnounceCached) {
    traffic_.announcedCached += cached.size();
    for (const CachedEntry& e : cached) record(from, bySlot(e, from));
  } else if (rank_ != kCoordinator && from == kCoordinator && kind == ControlKind::kDecision) {
    traffic_.decidedFull += decisions.size();
    for (const Decision& d : decisions) decided(d);
  } else if (rank_ != kCoordinator && from == kCoordinator &&
             kind == ControlKind::kDecisionCached) {
    traffic_.decidedCached += cached.size();
    for (const CachedEntry& e : cached) {
      Decision d;
      d.a = bySlot(e, from);
      d.key = d.a.key;
      d.occurrence = e.occurrence;
      d.rankA = e.rankA;
      decided_.push_back(d);
    }
  } else if (rank_ != kCoordinator && from == kCoordinator && kind == ControlKind::kLaunch) {
    launchesIn_.insert(launchesIn_.end(), launches.begin(), launches.end());
  } else {
    fail(priocclRemoteError, "unexpected control message of kind ", static_cast<int>(kind),
         " from rank ", from);
  }
  return kind;
}

namespace {

int32_t firstRank(const Announce&) {
  return -1;
}
int32_t firstRank(const Decision& d) {
  return d.rankA;
}

// `items` as messages, in order: runs of entries sent in full (encodeFull, at most perMessage a
// message) and of entries by response-cache slot (slots[i] != ResponseCache::kNone); counts them.
template <class T, class Encode>
std::vector<std::vector<unsigned char>> inRuns(const std::vector<T>& items,
                                               const std::vector<uint32_t>& slots,
                                               size_t perMessage, Encode encodeFull,
                                               ControlKind cachedKind, uint64_t* full,
                                               uint64_t* cached) {
  std::vector<std::vector<unsigned char>> messages;
  std::vector<CachedEntry> entries;
  for (size_t i = 0; i < items.size();) {
    const bool byslot = slots[i] != ResponseCache::kNone;
    const size_t most = byslot ? kCachedPerMessage : perMessage;
    size_t n = 1;
    while (n < most && i + n < items.size() && (slots[i + n] != ResponseCache::kNone) == byslot)
      ++n;
    if (byslot) {
      entries.clear();
      for (size_t j = i; j < i + n; ++j)
        entries.push_back({slots[j], firstRank(items[j]), items[j].occurrence});
      messages.push_back(encodeCached(cachedKind, entries.data(), n));
    } else {
      messages.push_back(encodeFull(items.data() + i, n));
    }
    *(byslot ? cached : full) += n;
    i += n;
  }
  return messages;
}

}  // namespace

std::vector<Negotiator::Outgoing> Negotiator::takeOutgoing() {
  for (std::vector<unsigned char>& msg :
       inRuns(announces_, announceSlots_, kAnnouncesPerMessage, encodeAnnounces,
              ControlKind::kAnnounceCached, &traffic_.announcedFull, &traffic_.announcedCached)) {
    traffic_.bytesOut += msg.size();
    out_.push_back({kCoordinator, std::move(msg)});
  }
  announces_.clear();
  announceSlots_.clear();
  for (const std::vector<unsigned char>& msg :
       inRuns(broadcast_, broadcastSlots_, kDecisionsPerMessage, encodeDecisions,
              ControlKind::kDecisionCached, &traffic_.decidedFull, &traffic_.decidedCached)) {
    traffic_.bytesOut += msg.size() * static_cast<uint64_t>(nranks_ - 1);
    for (int r = 0; r < nranks_; ++r)
      if (r != kCoordinator) out_.push_back({r, msg});
  }
  broadcast_.clear();
  broadcastSlots_.clear();
  // After the decisions: a launch refers to an op decided before it (receivers check anyway).
  for (size_t i = 0; i < launchesOut_.size(); i += kLaunchesPerMessage) {
    size_t n = std::min(kLaunchesPerMessage, launchesOut_.size() - i);
    std::vector<unsigned char> msg = encodeLaunches(launchesOut_.data() + i, n);
    for (int r = 0; r < nranks_; ++r)
      if (r != kCoordinator) out_.push_back({r, msg});
  }
  launchesOut_.clear();
  std::vector<Outgoing> out;
  out.swap(out_);
  return out;
}

void Negotiator::broadcastLaunches(const std::vector<LaunchEntry>& entries) {
  if (nranks_ > 1) launchesOut_.insert(launchesOut_.end(), entries.begin(), entries.end());
}

std::vector<LaunchEntry> Negotiator::takeLaunches() {
  std::vector<LaunchEntry> l;
  l.swap(launchesIn_);
  return l;
}

std::vector<Decision> Negotiator::takeDecisions() {
  std::vector<Decision> d;
  d.swap(decided_);
  return d;
}

}  // namespace prioccl::detail
