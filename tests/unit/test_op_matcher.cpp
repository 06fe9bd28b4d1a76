// The op matcher on plain values (src/core/op_matcher.h): numbering, the coordinator's decisions,
// the mismatch message, and the order in which agreed unnamed ops join their data lane. The MPI
// tests (test_bad_input, test_allreduce's named-op tests) check the same across real ranks.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/op_matcher.h"
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
  void end(OpState& op, priocclResult_t code, const std::string&) override {
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

}  // namespace
