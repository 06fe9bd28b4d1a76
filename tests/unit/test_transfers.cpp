// The cookie table and the control channel (src/core/transfers.h) over a transport that only
// records what it is asked to do.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/transfers.h"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::detail::Transfers;
using Kind = Transfers::Kind;

class RecordingTransport final : public prioccl::Transport {
 public:
  struct Call {
    bool send;
    int peer;
    uint64_t tag;
    const void* buf;
    size_t bytes;
    uint64_t cookie;
    prioccl::SendCompletion completion = prioccl::SendCompletion::kEndToEnd;
  };
  int rank() const override { return 0; }
  int size() const override { return 4; }
  const char* name() const override { return "recording"; }
  uint64_t tagSpace() const override { return 1000; }
  void postSend(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                prioccl::SendCompletion completion) override {
    calls.push_back({true, peer, tag, buf, bytes, cookie, completion});
  }
  void postRecv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) override {
    calls.push_back({false, peer, tag, buf, bytes, cookie});
  }
  size_t poll(std::vector<prioccl::Completion>&) override { return 0; }
  size_t pending() const override { return 0; }
  void cancelAll() override {}
  std::vector<Call> calls;
};

constexpr uint64_t kControlTag = 999;
constexpr size_t kControlBytes = 64;

TEST(Transfers, CookiesAreReusedOnlyAfterRelease) {
  RecordingTransport t;
  Transfers x(t, kControlTag, {1, 2}, kControlBytes, false);
  char buf[8];
  uint64_t a = x.post(Kind::kDataSend, 1, 5, buf, 8);
  uint64_t b = x.post(Kind::kDataRecv, 2, 6, buf, 8);
  EXPECT_NE(a, b);
  EXPECT_EQ(x.at(a).kind, Kind::kDataSend);
  EXPECT_EQ(x.at(b).peer, 2);
  EXPECT_EQ(x.at(b).bytes, 8u);
  ASSERT_EQ(t.calls.size(), 2u);
  EXPECT_TRUE(t.calls[0].send);
  EXPECT_FALSE(t.calls[1].send);
  EXPECT_EQ(t.calls[1].cookie, b);
  x.release(a);
  uint64_t c = x.post(Kind::kDataRecv, 3, 7, buf, 4);
  EXPECT_EQ(c, a) << "a released cookie is the next one handed out";
  EXPECT_EQ(x.at(c).peer, 3) << "and its record is the new transfer's";
  EXPECT_THROW(x.at(100), prioccl::InternalError);
}

TEST(Transfers, ForEachPostedSkipsReleasedRecords) {
  RecordingTransport t;
  Transfers x(t, kControlTag, {}, kControlBytes, false);
  char buf[8];
  uint64_t a = x.post(Kind::kDataSend, 1, 5, buf, 8);
  x.post(Kind::kDataRecv, 2, 6, buf, 8);
  x.release(a);
  std::vector<int> peers;
  x.forEachPosted([&](const Transfers::Posted& p) { peers.push_back(p.peer); });
  EXPECT_EQ(peers, std::vector<int>{2});
  x.clear();
  peers.clear();
  x.forEachPosted([&](const Transfers::Posted& p) { peers.push_back(p.peer); });
  EXPECT_TRUE(peers.empty());
}

TEST(Transfers, ControlReceivesStandOnTheControlTagAndAreReposted) {
  RecordingTransport t;
  Transfers x(t, kControlTag, {1, 3}, kControlBytes, false);
  x.postControlReceives();
  ASSERT_EQ(t.calls.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_FALSE(t.calls[i].send);
    EXPECT_EQ(t.calls[i].tag, kControlTag);
    EXPECT_EQ(t.calls[i].bytes, kControlBytes);
    EXPECT_EQ(t.calls[i].peer, x.controlPeers()[i]);
    EXPECT_EQ(t.calls[i].buf, x.controlMessage(i)) << "the message lands where it is read";
    EXPECT_EQ(x.at(t.calls[i].cookie).kind, Kind::kControlRecv);
    EXPECT_EQ(x.at(t.calls[i].cookie).step, static_cast<int>(i)) << "step = control peer index";
  }
  x.release(t.calls[1].cookie);
  x.repostControlReceive(1);
  ASSERT_EQ(t.calls.size(), 3u);
  EXPECT_EQ(t.calls[2].peer, 3);
  EXPECT_EQ(t.calls[2].buf, x.controlMessage(1));
  EXPECT_EQ(x.at(t.calls[2].cookie).step, 1);
}

TEST(Transfers, AControlSendKeepsItsBufferUntilSent) {
  RecordingTransport t;
  Transfers x(t, kControlTag, {1}, kControlBytes, false);
  std::vector<unsigned char> message(40, 0xAB);
  uint64_t cookie = x.sendControl(1, message);
  ASSERT_EQ(t.calls.size(), 1u);
  EXPECT_TRUE(t.calls[0].send);
  EXPECT_EQ(t.calls[0].tag, kControlTag);
  EXPECT_EQ(t.calls[0].bytes, 40u);
  EXPECT_NE(t.calls[0].buf, static_cast<const void*>(message.data())) << "a copy is kept";
  message.assign(40, 0);  // the caller's copy changes; what the transport reads must not
  EXPECT_EQ(std::memcmp(t.calls[0].buf, std::vector<unsigned char>(40, 0xAB).data(), 40), 0);
  x.release(cookie);
  x.controlSent(cookie);
}

// An abort notice goes on after the transport's cancelAll (SendCompletion::kDelivered): clearing
// the records must not free what the transport may still read.
TEST(Transfers, ClearKeepsControlSendsUnderWayUntilTheTrafficEnds) {
  RecordingTransport t;
  Transfers x(t, kControlTag, {1, 2}, kControlBytes, false);
  x.sendControl(1, std::vector<unsigned char>(40, 0xCD), prioccl::SendCompletion::kDelivered);
  x.sendControl(2, std::vector<unsigned char>(16, 0xEF));
  ASSERT_EQ(t.calls.size(), 2u);
  EXPECT_EQ(t.calls[0].completion, prioccl::SendCompletion::kDelivered);
  EXPECT_EQ(t.calls[1].completion, prioccl::SendCompletion::kEndToEnd);
  x.clear();
  // Still readable (ASan builds would report a use after free here).
  EXPECT_EQ(std::memcmp(t.calls[0].buf, std::vector<unsigned char>(40, 0xCD).data(), 40), 0);
  EXPECT_EQ(std::memcmp(t.calls[1].buf, std::vector<unsigned char>(16, 0xEF).data(), 16), 0);
  x.endTraffic(true);
}

}  // namespace
