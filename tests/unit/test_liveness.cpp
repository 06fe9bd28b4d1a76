// What the traffic says about each peer (src/core/liveness.h): heartbeats, silence, goodbyes, and
// a lost endpoint's failure held while the peer's reason may still come.
#include <gtest/gtest.h>

#include <chrono>

#include "core/liveness.h"

namespace {

using prioccl::detail::Liveness;
using Clock = Liveness::Clock;
using std::chrono::milliseconds;

TEST(Liveness, SilentPeerIsLostAfterTheTimeoutUnlessItSaidGoodbye) {
  Clock::time_point t0 = Clock::now();
  Liveness l(3, {1, 2}, 1.0, t0);
  EXPECT_TRUE(l.enabled());
  EXPECT_EQ(l.period(), milliseconds(100));
  EXPECT_EQ(l.lost(t0 + milliseconds(900)), -1);
  l.heard(1, t0 + milliseconds(500));
  EXPECT_EQ(l.lost(t0 + milliseconds(1100)), 2);
  l.left(2);
  EXPECT_EQ(l.lost(t0 + milliseconds(1100)), -1);
  EXPECT_EQ(l.lost(t0 + milliseconds(1600)), 1);
  EXPECT_EQ(Liveness(3, {1, 2}, 0, t0).lost(t0 + std::chrono::hours(1)), -1) << "off";
}

TEST(Liveness, LostEndpointWaitsForThePeersReasonThenFails) {
  Clock::time_point t0 = Clock::now();
  Liveness l(3, {1, 2}, 0, t0);  // holds whether heartbeats are on or not
  EXPECT_FALSE(l.awaitingCause());
  EXPECT_EQ(l.causeOverdue(t0), nullptr);
  l.endpointLost(1, priocclRemoteError, "send to rank 1 failed (UCX): Endpoint timeout", t0);
  EXPECT_TRUE(l.awaitingCause());
  EXPECT_EQ(l.causeOverdue(t0 + Liveness::kCauseWait - milliseconds(1)), nullptr);
  // A later one adds nothing: the first is what the communicator fails with.
  l.endpointLost(2, priocclSystemError, "receive from rank 2 failed", t0 + milliseconds(500));
  const Liveness::HeldFailure* held = l.causeOverdue(t0 + Liveness::kCauseWait);
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(held->peer, 1);
  EXPECT_EQ(held->code, priocclRemoteError);
  EXPECT_EQ(held->message, "send to rank 1 failed (UCX): Endpoint timeout");
}

}  // namespace
