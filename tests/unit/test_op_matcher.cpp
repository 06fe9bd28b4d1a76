// The op matcher on plain values (src/core/op_matcher.h): numbering, the coordinator's decisions,
// the mismatch message, and the order in which agreed unnamed ops join their data lane. The MPI
// tests (test_bad_input, test_allreduce's named-op tests) check the same across real ranks.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/op_matcher.h"
#include "core/stand_in.h"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::detail::Announce;
using prioccl::detail::Decision;
using prioccl::detail::keyHash;
using prioccl::detail::kPointToPointSeqBase;
using prioccl::detail::OpMatcher;
using prioccl::detail::OpState;
using namespace prioccl::detail;  // the lane constants

std::shared_ptr<OpState> unnamed(size_t count = 10) {
  auto op = std::make_shared<OpState>();
  op->count = count;
  return op;
}

std::shared_ptr<OpState> named(const std::string& key, size_t count = 10) {
  auto op = unnamed(count);
  op->named = true;
  op->key = key;
  return op;
}

TEST(OpMatcher, UnnamedOpsAreNumberedInSubmissionOrderFromTheApplicationsFirst) {
  OpMatcher m;
  auto own = unnamed();
  EXPECT_EQ(m.number(*own).occurrence, 0u);  // the communicator's own op at creation
  m.startApplication();
  EXPECT_EQ(m.nextUnnamed(), 0u);
  auto a = unnamed(), b = unnamed(7);
  Announce first = m.number(*a), second = m.number(*b);
  EXPECT_EQ(a->globalSeq, 1u);
  EXPECT_EQ(a->occurrence, 0u) << "messages number the application's ops from 0";
  EXPECT_EQ(b->occurrence, 1u);
  EXPECT_EQ(first.occurrence, 1u) << "the wire carries the global sequence";
  EXPECT_EQ(second.count, 7u);
  EXPECT_EQ(first.key, 0u) << "unnamed ops share key 0";
  EXPECT_EQ(OpMatcher::arguments(*b).occurrence, second.occurrence);
  auto p2p = unnamed();
  p2p->kind = OpState::Kind::kSend;
  m.numberPointToPoint(*p2p);
  EXPECT_EQ(p2p->globalSeq, kPointToPointSeqBase);
  EXPECT_EQ(m.nextUnnamed(), 2u) << "point-to-point ops do not take unnamed numbers";
}

TEST(OpMatcher, NamedOpsLeaveInTheCoordinatorsOrder) {
  OpMatcher m;
  auto x0 = named("x"), y0 = named("y"), x1 = named("x");
  for (auto& op : {x0, y0, x1}) m.awaitDecision(op, m.number(*op));
  EXPECT_EQ(x1->occurrence, 1u) << "occurrences count per key";
  EXPECT_EQ(y0->occurrence, 0u);
  EXPECT_TRUE(m.awaitingDecision(*x1));
  EXPECT_FALSE(m.empty());
  std::string mismatch = "stale";
  Decision d;
  d.key = keyHash(*x1);
  d.occurrence = 1;
  EXPECT_EQ(m.decided(d, &mismatch), x1);
  EXPECT_TRUE(mismatch.empty());
  EXPECT_EQ(x1->globalSeq, 0u) << "the first decided op is first in the global order";
  EXPECT_FALSE(m.awaitingDecision(*x1));
  d.key = keyHash(*x0);
  d.occurrence = 0;
  d.ok = 0;
  d.rankA = 0;
  d.rankB = 3;
  d.a = OpMatcher::arguments(*x0);
  d.b = d.a;
  d.b.count = 12;
  EXPECT_EQ(m.decided(d, &mismatch), x0);
  EXPECT_EQ(x0->globalSeq, 1u);
  EXPECT_NE(mismatch.find("'x' (occurrence 0)"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("rank 0 had count 10"), std::string::npos) << mismatch;
  EXPECT_NE(mismatch.find("rank 3 had count 12"), std::string::npos) << mismatch;
  d.occurrence = 5;  // never submitted here
  EXPECT_THROW(m.decided(d, &mismatch), prioccl::Error);
  std::vector<std::shared_ptr<OpState>> doomed;
  m.clear(doomed);
  ASSERT_EQ(doomed.size(), 1u);
  EXPECT_EQ(doomed[0], y0);
  EXPECT_TRUE(m.empty());
}

TEST(OpMatcher, AgreedUnnamedOpsJoinTheirLaneInSubmissionOrder) {
  OpMatcher m;
  std::vector<std::shared_ptr<OpState>> ops;
  for (int i = 0; i < 4; ++i) {
    ops.push_back(unnamed());
    m.number(*ops.back());
  }
  std::vector<uint64_t> joined;
  auto join = [&](std::shared_ptr<OpState> op) { joined.push_back(op->globalSeq); };
  m.agreementEnded(2, ops[2], join);
  m.agreementEnded(1, nullptr, join);  // agreed and done (carried): nothing left to move
  EXPECT_TRUE(joined.empty()) << "op 0's agreement has not ended";
  int waiting = 0;
  m.forEachWaiting([&](OpState&, bool agreed) { waiting += agreed; });
  EXPECT_EQ(waiting, 1) << "only op 2 waits with data to move";
  m.agreementEnded(0, ops[0], join);
  EXPECT_EQ(joined, (std::vector<uint64_t>{0, 2}));
  m.agreementEnded(3, ops[3], join);
  EXPECT_EQ(joined, (std::vector<uint64_t>{0, 2, 3}));
  EXPECT_TRUE(m.empty());
}

// Records where the matcher sends ops.
struct RecordingSink : OpMatcher::Sink {
  struct Event {
    char what;  // 'j' join, 'm' matched, 'e' end
    const OpState* op;
    uint32_t lane;
    priocclResult_t code;
  };
  void join(uint32_t lane, std::shared_ptr<OpState> op) override {
    events.push_back({'j', op.get(), lane, priocclSuccess});
  }
  void matched(const OpState& op) override { events.push_back({'m', &op, 0, priocclSuccess}); }
  void endOp(OpState& op, priocclResult_t code, const std::string&) override {
    events.push_back({'e', &op, 0, code});
  }
  std::vector<Event> events;
};

TEST(OpMatcher, AdmittedOpsTakeTheirWayIntoTheLanes) {
  OpMatcher m;
  Negotiator n(0, 1);  // one rank: the coordinator decides as soon as it announces
  RecordingSink sink;
  auto send = unnamed(8), emptySend = unnamed(0), plain = unnamed(), key = named("k"),
       emptyKey = named("z", 0);
  send->kind = emptySend->kind = OpState::Kind::kSend;
  send->peer = emptySend->peer = 1;
  for (auto& op : {send, emptySend, plain, key, emptyKey}) m.admit(op, n, sink);
  ASSERT_EQ(sink.events.size(), 3u) << "named ops wait for the coordinator";
  EXPECT_EQ(sink.events[0].what, 'j');
  EXPECT_EQ(sink.events[0].lane, kPointToPointLanes);
  EXPECT_EQ(send->globalSeq, kPointToPointSeqBase);
  EXPECT_EQ(sink.events[1].what, 'e') << "a point-to-point op of nothing ends at once";
  EXPECT_EQ(sink.events[1].code, priocclSuccess);
  EXPECT_EQ(sink.events[2].op, plain.get());
  EXPECT_EQ(sink.events[2].lane, kAgreeLane) << "an unnamed op starts with its agreement";
  EXPECT_TRUE(m.awaitingDecision(*key));
  sink.events.clear();
  std::vector<Decision> decisions = n.takeDecisions();
  ASSERT_EQ(decisions.size(), 2u);
  for (const Decision& d : decisions) m.apply(d, sink);
  ASSERT_EQ(sink.events.size(), 4u);
  EXPECT_EQ(sink.events[0].what, 'm');
  EXPECT_EQ(sink.events[1].what, 'j');
  EXPECT_EQ(sink.events[1].op, key.get());
  EXPECT_EQ(sink.events[1].lane, kNamedLane);
  EXPECT_EQ(sink.events[2].what, 'm');
  EXPECT_EQ(sink.events[3].what, 'e') << "a matched op of nothing ends there";
  EXPECT_EQ(sink.events[3].op, emptyKey.get());
  EXPECT_TRUE(m.empty());
}

// ---- Joins (priocclJoin): the coordinator answers for ranks that joined.

Announce announce(uint64_t key, OpState::Kind kind, uint64_t occurrence = 0, int root = -1) {
  Announce a;
  a.key = key;
  a.occurrence = occurrence;
  a.kind = static_cast<int32_t>(kind);
  a.count = kind == OpState::Kind::kBarrier || kind == OpState::Kind::kJoin ? 0 : 4;
  a.dtype = priocclFloat32;
  a.root = root;
  return a;
}

// Rank `from` (not the coordinator) says `a`.
void hear(Negotiator& n, int from, const Announce& a) {
  std::vector<unsigned char> msg = prioccl::detail::encodeAnnounces(&a, 1);
  n.onMessage(from, msg.data(), msg.size());
}

TEST(Negotiator, JoinedRanksAreCountedInForTheOpsTheyCanTakePartIn) {
  using K = OpState::Kind;
  const uint64_t kJoin = 99, kX = 1, kY = 2, kB = 3, kZ = 4;
  Negotiator n(0, 3);
  hear(n, 2, announce(kJoin, K::kJoin));  // rank 2 runs out of work
  n.submit(announce(kX, K::kAllReduce));
  EXPECT_TRUE(n.takeDecisions().empty()) << "rank 1 has not announced X";
  hear(n, 1, announce(kX, K::kAllReduce));
  std::vector<Decision> d = n.takeDecisions();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].ok);
  EXPECT_EQ(d[0].filled, 1u) << "rank 2 takes part without announcing";
  EXPECT_EQ(d[0].a.count, 4u) << "with the arguments the others announced";

  // An all-gather needs data from every rank: it fails, naming the joined rank.
  n.submit(announce(kY, K::kAllGather));
  hear(n, 1, announce(kY, K::kAllGather));
  // So does a broadcast from the joined rank; one from rank 1 is answered.
  n.submit(announce(kB, K::kBroadcast, 0, 2));
  hear(n, 1, announce(kB, K::kBroadcast, 0, 2));
  n.submit(announce(kB, K::kBroadcast, 1, 1));
  hear(n, 1, announce(kB, K::kBroadcast, 1, 1));
  d = n.takeDecisions();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_FALSE(d[0].ok);
  EXPECT_EQ(d[0].rankB, 2);
  EXPECT_EQ(d[0].b.kind, prioccl::detail::kJoinWireKind);
  EXPECT_FALSE(d[1].ok) << "the root has no data once it joined";
  EXPECT_TRUE(d[2].ok);
  EXPECT_EQ(d[2].filled, 1u);

  // Rank 1 announces Z, then joins; the coordinator joins last without announcing Z: Z is decided
  // (two ranks filled in), then the join, naming rank 0 as the last.
  hear(n, 1, announce(kZ, K::kAllReduce));
  hear(n, 1, announce(kJoin, K::kJoin));
  EXPECT_TRUE(n.takeDecisions().empty()) << "rank 0 has neither announced Z nor joined";
  n.submit(announce(kJoin, K::kJoin));
  d = n.takeDecisions();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].key, kZ);
  EXPECT_EQ(d[0].filled, 2u);
  EXPECT_TRUE(d[0].ok);
  EXPECT_EQ(d[1].key, kJoin);
  EXPECT_TRUE(d[1].ok);
  EXPECT_EQ(d[1].a.root, 0) << "the last rank to join";
  EXPECT_EQ(d[1].filled, 0u);

  // The join is over: an op waits for every rank again.
  n.submit(announce(kX, K::kAllReduce, 1));
  hear(n, 1, announce(kX, K::kAllReduce, 1));
  EXPECT_TRUE(n.takeDecisions().empty()) << "rank 2 no longer counts as joined";
  hear(n, 2, announce(kX, K::kAllReduce, 1));
  d = n.takeDecisions();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].filled, 0u);
}

// ---- The response cache: a signature decided once goes by slot afterwards.

// Delivers everything `from` has to send to `to` (when addressed to it); returns the bytes.
size_t deliver(Negotiator& from, int fromRank, Negotiator& to, int toRank) {
  size_t bytes = 0;
  for (const Negotiator::Outgoing& out : from.takeOutgoing()) {
    if (out.peer != toRank) continue;
    bytes += out.bytes.size();
    to.onMessage(fromRank, out.bytes.data(), out.bytes.size());
  }
  return bytes;
}

bool sameDecision(const Decision& x, const Decision& y) {
  return std::memcmp(&x, &y, sizeof x) == 0;  // no padding in the wire structs
}

TEST(Negotiator, ASignatureDecidedOnceGoesBySlotAndEveryMismatchIsStillFound) {
  using K = OpState::Kind;
  const uint64_t kX = 11, kY = 12;
  Negotiator coordinator(0, 2, 8), other(1, 2, 8);
  // Runs one op: each side announces its own version; returns the two sides' decisions (which
  // must be equal) and the bytes each way.
  struct Round {
    Decision d;
    size_t in = 0, out = 0;
  };
  auto round = [&](const Announce& mine, const Announce& theirs) {
    Round r;
    other.submit(theirs);
    r.in = deliver(other, 1, coordinator, 0);
    coordinator.submit(mine);
    r.out = deliver(coordinator, 0, other, 1);
    std::vector<Decision> here = coordinator.takeDecisions(), there = other.takeDecisions();
    EXPECT_EQ(here.size(), 1u);
    EXPECT_EQ(there.size(), 1u);
    if (here.size() == 1 && there.size() == 1) {
      EXPECT_TRUE(sameDecision(here[0], there[0])) << "the other rank rebuilt another decision";
      r.d = here[0];
    }
    return r;
  };
  Round first = round(announce(kX, K::kAllReduce, 0), announce(kX, K::kAllReduce, 0));
  EXPECT_TRUE(first.d.ok);
  EXPECT_EQ(first.in, 16 + sizeof(Announce)) << "a new signature is announced in full";
  EXPECT_EQ(first.out, 16 + sizeof(Decision)) << "and decided in full";
  EXPECT_EQ(coordinator.cachedSignatures(), 1u);
  EXPECT_EQ(other.cachedSignatures(), 1u) << "both learn it from the decision";

  Round again = round(announce(kX, K::kAllReduce, 1), announce(kX, K::kAllReduce, 1));
  EXPECT_TRUE(again.d.ok);
  EXPECT_EQ(again.d.occurrence, 1u);
  EXPECT_EQ(again.d.rankA, 1) << "the first rank to announce, as in a full decision";
  EXPECT_EQ(again.in, 16 + sizeof(CachedEntry)) << "seen before: announced by slot";
  EXPECT_EQ(again.out, 16 + sizeof(CachedEntry)) << "and decided by slot";

  // The other rank's count differs from the slot's: it announces in full, and the coordinator
  // finds the mismatch as it always did, naming both sides.
  Announce changed = announce(kX, K::kAllReduce, 2);
  changed.count = 5;
  Round mismatch = round(announce(kX, K::kAllReduce, 2), changed);
  EXPECT_FALSE(mismatch.d.ok);
  EXPECT_EQ(mismatch.d.rankA, 1);
  EXPECT_EQ(mismatch.d.a.count, 5u);
  EXPECT_EQ(mismatch.d.rankB, 0);
  EXPECT_EQ(mismatch.d.b.count, 4u);
  EXPECT_EQ(mismatch.in, 16 + sizeof(Announce));
  EXPECT_EQ(mismatch.out, 16 + sizeof(Decision)) << "a failed op is decided in full";
  // The coordinator's own version differs from the slot (the other's matches): found too.
  Announce mineChanged = announce(kX, K::kAllReduce, 3);
  mineChanged.dtype = priocclInt32;
  Round mine = round(mineChanged, announce(kX, K::kAllReduce, 3));
  EXPECT_FALSE(mine.d.ok);
  EXPECT_EQ(mine.in, 16 + sizeof(CachedEntry)) << "the other rank's op is the cached one";

  // A second signature under another key gets a slot of its own; both keep theirs.
  round(announce(kY, K::kBroadcast, 0, 1), announce(kY, K::kBroadcast, 0, 1));
  EXPECT_EQ(coordinator.cachedSignatures(), 2u);
  Round y = round(announce(kY, K::kBroadcast, 1, 1), announce(kY, K::kBroadcast, 1, 1));
  EXPECT_EQ(y.in, 16 + sizeof(CachedEntry));
  EXPECT_EQ(y.d.a.root, 1);
  Round x = round(announce(kX, K::kAllReduce, 4), announce(kX, K::kAllReduce, 4));
  EXPECT_TRUE(x.d.ok);
  EXPECT_EQ(x.out, 16 + sizeof(CachedEntry));
  EXPECT_EQ(coordinator.traffic().announcedCached, 4u);
  EXPECT_EQ(other.traffic().decidedCached, 3u);
}

TEST(Negotiator, FullAndSlotEntriesLeaveInSubmissionOrder) {
  using K = OpState::Kind;
  Negotiator coordinator(0, 2, 8), other(1, 2, 8);
  // Learn X's signature.
  other.submit(announce(1, K::kAllReduce, 0));
  deliver(other, 1, coordinator, 0);
  coordinator.submit(announce(1, K::kAllReduce, 0));
  deliver(coordinator, 0, other, 1);
  coordinator.takeDecisions();
  other.takeDecisions();
  // X (by slot), Z (new, in full), X again (by slot): three messages, in that order.
  other.submit(announce(1, K::kAllReduce, 1));
  other.submit(announce(2, K::kAllReduce, 0));
  other.submit(announce(1, K::kAllReduce, 2));
  std::vector<Negotiator::Outgoing> out = other.takeOutgoing();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].bytes.size(), 16 + sizeof(CachedEntry));
  EXPECT_EQ(out[1].bytes.size(), 16 + sizeof(Announce));
  EXPECT_EQ(out[2].bytes.size(), 16 + sizeof(CachedEntry));
}

TEST(Negotiator, WithoutACacheEverythingGoesInFullAndAnUnknownSlotIsAnError) {
  using K = OpState::Kind;
  Negotiator coordinator(0, 2, 0), other(1, 2, 0);
  for (uint64_t occurrence = 0; occurrence < 3; ++occurrence) {
    other.submit(announce(7, K::kAllReduce, occurrence));
    EXPECT_EQ(deliver(other, 1, coordinator, 0), 16 + sizeof(Announce));
    coordinator.submit(announce(7, K::kAllReduce, occurrence));
    EXPECT_EQ(deliver(coordinator, 0, other, 1), 16 + sizeof(Decision));
  }
  EXPECT_EQ(coordinator.cachedSignatures(), 0u);
  CachedEntry stray{3, -1, 0};
  std::vector<unsigned char> msg =
      encodeCached(prioccl::detail::ControlKind::kAnnounceCached, &stray, 1);
  EXPECT_THROW(coordinator.onMessage(1, msg.data(), msg.size()), prioccl::Error);
  msg = encodeCached(prioccl::detail::ControlKind::kDecisionCached, &stray, 1);
  EXPECT_THROW(other.onMessage(0, msg.data(), msg.size()), prioccl::Error);
}

TEST(OpMatcher, AJoinedRankAdoptsTheOpsItWasAnsweredFor) {
  OpMatcher m;
  RecordingSink sink;
  auto x = named("x");
  Decision d;
  d.key = keyHash(*x);
  d.occurrence = 0;
  d.filled = 1;
  d.a = OpMatcher::arguments(*x);
  EXPECT_FALSE(m.awaits(d));
  auto standIn = named("(stand-in)");
  m.adopt(d, standIn);
  EXPECT_TRUE(m.awaits(d));
  m.apply(d, sink);
  ASSERT_EQ(sink.events.size(), 2u);
  EXPECT_EQ(sink.events[1].op, standIn.get());
  EXPECT_EQ(sink.events[1].lane, kNamedLane);
  // Occurrence 1 was answered and failed (nothing to run): later ops with the key come after it.
  d.occurrence = 1;
  d.ok = 0;
  m.adopt(d, nullptr);
  EXPECT_FALSE(m.awaits(d));
  Announce a = m.number(*x);
  EXPECT_EQ(a.occurrence, 2u) << "numbered as on the ranks that submitted them";
  m.awaitDecision(x, a);
  d.occurrence = 2;
  d.ok = 1;
  d.filled = 0;
  m.apply(d, sink);
  EXPECT_EQ(x->globalSeq, 2u) << "the failed op took its place in the global order here too";
}

TEST(StandIn, HoldsTheIdentityInBuffersOfTheDecidedShape) {
  Decision d;
  d.filled = 1;
  d.a.kind = static_cast<int32_t>(OpState::Kind::kReduceScatter);
  d.a.count = 3;
  d.a.dtype = priocclFloat32;
  d.a.op = priocclMin;
  auto op = prioccl::detail::makeStandIn(d, 1, 4);
  ASSERT_EQ(op->ownBuffer.size(), 3u * 4 * sizeof(float));
  EXPECT_EQ(op->send, op->ownBuffer.data());
  EXPECT_EQ(op->recv, op->ownBuffer.data() + 3 * sizeof(float)) << "rank 1's block, in place";
  float first;
  std::memcpy(&first, op->ownBuffer.data(), sizeof first);
  EXPECT_EQ(first, std::numeric_limits<float>::infinity());
  d.a.kind = static_cast<int32_t>(OpState::Kind::kBroadcast);
  d.a.root = 0;
  op = prioccl::detail::makeStandIn(d, 1, 4);
  EXPECT_EQ(op->send, nullptr) << "a broadcast's stand-in only receives";
  EXPECT_NE(op->recv, nullptr);
  d.a.kind = static_cast<int32_t>(OpState::Kind::kAllGather);
  EXPECT_THROW(prioccl::detail::makeStandIn(d, 1, 4), prioccl::Error)
      << "never answered for a joined rank";
}

}  // namespace
