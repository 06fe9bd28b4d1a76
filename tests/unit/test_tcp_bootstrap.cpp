// The TCP bootstrap (transports/tcp/tcp_bootstrap.h) with threads as ranks: the unique id, the
// join, every collective, send/recv, split; and what must not harm a job: garbage, another job's
// token, a duplicate rank, a silent client, a rank that never arrives (every rank fails in time,
// naming it).
#include "tcp/tcp_bootstrap.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "prioccl/prioccl.hpp"
#include "setup_cancel.h"

namespace prioccl {
namespace {

using std::chrono::milliseconds;

// Runs body(rank) on `n` threads; returns each rank's error ("" when it returned).
std::vector<std::string> onRanks(int n, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A connection to the id's listener (IPv4 loopback in these tests), or -1.
int rawConnect(const UniqueIdFields& id) {
  int fd = ::socket(id.root.ss_family, SOCK_STREAM, 0);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&id.root),
                id.root.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(TcpBootstrap, UniqueIdRoundTripsAndRefusesGarbage) {
  UniqueIdFields id = newUniqueId("127.0.0.1:29601", "");
  unsigned char bytes[kUniqueIdBytes];
  encodeUniqueId(id, bytes);
  UniqueIdFields back;
  std::string error;
  ASSERT_TRUE(decodeUniqueId(bytes, &back, &error)) << error;
  EXPECT_EQ(std::memcmp(back.token, id.token, kTokenBytes), 0);
  EXPECT_EQ(addressText(back.root), "127.0.0.1:29601");
  // PRIOCCL_COMM_ID gives every caller the same id.
  UniqueIdFields again = newUniqueId("127.0.0.1:29601", "");
  EXPECT_EQ(std::memcmp(again.token, id.token, kTokenBytes), 0);
  EXPECT_EQ(addressText(newUniqueId("[::1]:29602", "").root), "[::1]:29602");
  unsigned char zeros[kUniqueIdBytes] = {};
  EXPECT_FALSE(decodeUniqueId(zeros, &back, &error));
  EXPECT_NE(error.find("not a unique id"), std::string::npos) << error;
  for (const char* bad : {"127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", ":29600", "a:b:c"})
    EXPECT_THROW(newUniqueId(bad, ""), InvalidArgument) << bad;
  // Without PRIOCCL_COMM_ID: a random token each time, an address of this host with a port.
  UniqueIdFields a = newUniqueId("", ""), b = newUniqueId("", "");
  EXPECT_NE(std::memcmp(a.token, b.token, kTokenBytes), 0);
  EXPECT_NE(addressText(a.root).find(':'), std::string::npos);
}

TEST(TcpBootstrap, EveryCallAcrossFourRanks) {
  const int n = 4;
  UniqueIdFields id = newUniqueId("", "");
  auto errors = onRanks(n, [&](int r) {
    TcpBootstrap b(id, r, n, milliseconds(20000));
    EXPECT_EQ(b.rank(), r);
    EXPECT_EQ(b.size(), n);
    EXPECT_EQ(b.processIds(), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(b.sameHost(), std::vector<char>(n, 1));  // one process
    // allGather with parts of different lengths (rank 0's empty).
    std::string mine(static_cast<size_t>(r) * 1000, static_cast<char>('a' + r));
    auto parts = b.allGather(mine.data(), mine.size());
    ASSERT_EQ(parts.size(), 4u);
    for (int k = 0; k < n; ++k)
      EXPECT_EQ(std::string(parts[k].begin(), parts[k].end()),
                std::string(static_cast<size_t>(k) * 1000, static_cast<char>('a' + k)));
    std::vector<double> v{double(r), -double(r)};
    b.allReduceMax(v);
    EXPECT_EQ(v, (std::vector<double>{3.0, 0.0}));
    b.barrier();
    // A ring shift of 3 MiB (both ways at once, so it cannot deadlock), then send/recv pairs.
    std::vector<int> out(3 << 18, r), in(out.size(), -1);
    b.sendRecv((r + 1) % n, out.data(), (r + n - 1) % n, in.data(), out.size() * sizeof(int));
    EXPECT_EQ(in[12345], (r + n - 1) % n);
    int token = 100 + r, got = -1;
    if (r % 2 == 0) {
      b.send(r + 1, &token, sizeof token);
      b.recv(r + 1, &got, sizeof got);
    } else {
      b.recv(r - 1, &got, sizeof got);
      b.send(r - 1, &token, sizeof token);
    }
    EXPECT_EQ(got, 100 + (r ^ 1));
    EXPECT_THROW(b.send(r, &token, sizeof token), InvalidArgument);
    // A message of another length than expected is refused, naming the sender.
    if (r == 2) b.send(3, &token, sizeof token);
    if (r == 3) {
      int64_t wide = 0;
      try {
        b.recv(2, &wide, sizeof wide);
        ADD_FAILURE() << "a 4-byte message taken as 8";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 2 sent a message of 4 bytes"), std::string::npos)
            << e.what();
      }
    }
    // Split: evens and odds, keys reversed; rank 1 (colour -1) is in neither.
    int color = r == 1 ? -1 : r % 2;
    std::unique_ptr<Bootstrap> part = b.split(color, -r);
    if (r == 1) {
      EXPECT_EQ(part, nullptr);
      return;
    }
    ASSERT_NE(part, nullptr);
    const int expectSize = r % 2 == 0 ? 2 : 1;
    EXPECT_EQ(part->size(), expectSize);
    if (r % 2 == 0) {
      EXPECT_EQ(part->rank(), r == 2 ? 0 : 1);  // reversed keys
      EXPECT_EQ(part->processIds(), (std::vector<int>{2, 0}));
      auto got2 = part->allGather(&r, sizeof r);
      int first = 0;
      std::memcpy(&first, got2[0].data(), sizeof first);
      EXPECT_EQ(first, 2);
      part->barrier();
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

// Strays at rank 0's listener before and while the ranks join: garbage, a frame of another job,
// a silent connection, a connection closed halfway. The job forms all the same.
TEST(TcpBootstrap, StrayClientsAreDroppedAndTheJobForms) {
  UniqueIdFields id = newUniqueId("127.0.0.1:29611", "");
  std::thread strays([&] {
    std::vector<int> open;
    for (int attempt = 0; attempt < 200 && open.empty(); ++attempt) {
      int fd = rawConnect(id);  // rank 0 may not listen yet
      if (fd >= 0)
        open.push_back(fd);
      else
        std::this_thread::sleep_for(milliseconds(10));
    }
    ASSERT_FALSE(open.empty());
    const char garbage[] = "GET / HTTP/1.0\r\n\r\n0123456789012345678901234567890123456789012345";
    ::send(open[0], garbage, sizeof garbage, MSG_NOSIGNAL);
    // A well-formed hello of another job (wrong token) claiming rank 1.
    UniqueIdFields other = newUniqueId("127.0.0.1:29612", "");
    unsigned char hello[72] = {};
    const uint32_t magic = 0x50434242;
    const uint16_t version = 1, type = 1;
    const int32_t rank = 1, size = 3;
    const uint64_t bytes = 32;
    std::memcpy(hello, &magic, 4);
    std::memcpy(hello + 4, &version, 2);
    std::memcpy(hello + 6, &type, 2);
    std::memcpy(hello + 8, &rank, 4);
    std::memcpy(hello + 12, &size, 4);
    std::memcpy(hello + 16, &bytes, 8);
    std::memcpy(hello + 24, other.token, 16);
    int wrong = rawConnect(id);
    ::send(wrong, hello, sizeof hello, MSG_NOSIGNAL);
    int silent = rawConnect(id);
    int halfway = rawConnect(id);
    ::send(halfway, hello, 10, MSG_NOSIGNAL);
    ::close(halfway);
    std::this_thread::sleep_for(milliseconds(300));
    for (int fd : {open[0], wrong, silent}) ::close(fd);
  });
  std::this_thread::sleep_for(milliseconds(50));
  auto errors = onRanks(3, [&](int r) {
    if (r > 0) std::this_thread::sleep_for(milliseconds(200));  // after the strays
    TcpBootstrap b(id, r, 3, milliseconds(20000));
    auto parts = b.allGather(&r, sizeof r);
    int last = 0;
    std::memcpy(&last, parts[2].data(), sizeof last);
    EXPECT_EQ(last, 2);
  });
  strays.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

// A rank that never arrives: every rank that did fails at the deadline, naming it; so does a
// second rank 1 (dropped), which learns nothing but that rank 0 closed on it.
TEST(TcpBootstrap, AMissingRankFailsEveryRankInTimeNamingIt) {
  UniqueIdFields id = newUniqueId("127.0.0.1:29621", "");
  const auto start = std::chrono::steady_clock::now();
  auto errors = onRanks(3, [&](int r) {
    TcpBootstrap b(id, r == 2 ? 1 : r, 4, milliseconds(1500));  // ranks 0, 1, 1; 2 and 3 missing
  });
  const double seconds = secondsSince(start);
  EXPECT_LT(seconds, 1.5 + 5);
  EXPECT_NE(errors[0].find("rank(s) [2, 3] of 4 did not arrive"), std::string::npos) << errors[0];
  // Of the two rank 1s, the one rank 0 took hears why; the other is dropped (a duplicate).
  int told = 0;
  for (size_t r : {size_t{1}, size_t{2}}) {
    EXPECT_NE(errors[r], "") << "rank 1 #" << r;
    if (errors[r].find("rank 0 says: rank(s) [2, 3]") != std::string::npos) ++told;
  }
  EXPECT_EQ(told, 1) << errors[1] << " | " << errors[2];
}

// Shrink: rank 0 leaves (its bootstrap closes, as a dead process's would), the others make a
// group without it, renumbered in order; that group shrinks again without its own rank 1.
TEST(TcpBootstrap, ShrinkLeavesRanksOutRankZeroIncluded) {
  const int n = 4;
  UniqueIdFields id = newUniqueId("", "");
  auto errors = onRanks(n, [&](int r) {
    auto b = std::make_unique<TcpBootstrap>(id, r, n, milliseconds(20000));
    b->barrier();
    if (r == 0) return;                                // gone: its sockets close with it
    EXPECT_THROW(b->shrink({0, r}), InvalidArgument);  // a caller may not exclude itself
    EXPECT_THROW(b->shrink({0, 4}), InvalidArgument);
    EXPECT_THROW(b->shrink({0, 0}), InvalidArgument);
    std::unique_ptr<Bootstrap> rest = b->shrink({0});
    ASSERT_NE(rest, nullptr);
    EXPECT_EQ(rest->rank(), r - 1);
    EXPECT_EQ(rest->size(), 3);
    EXPECT_EQ(rest->processIds(), (std::vector<int>{1, 2, 3}));
    auto parts = rest->allGather(&r, sizeof r);
    ASSERT_EQ(parts.size(), 3u);
    for (int k = 0; k < 3; ++k) {
      int v = -1;
      std::memcpy(&v, parts[static_cast<size_t>(k)].data(), sizeof v);
      EXPECT_EQ(v, k + 1);
    }
    if (rest->rank() == 1) return;  // old rank 2 leaves the shrunk group too
    std::unique_ptr<Bootstrap> two = rest->shrink({1});
    EXPECT_EQ(two->processIds(), (std::vector<int>{1, 3}));
    std::vector<double> v{double(r)};
    two->allReduceMax(v);
    EXPECT_EQ(v[0], 3.0);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

// Survivors that exclude different ranks do not form different groups: every one fails within
// the timeout (plus the join's grace), none hangs.
TEST(TcpBootstrap, ShrinkersThatDisagreeAllFailInTime) {
  UniqueIdFields id = newUniqueId("", "");
  const auto timeout = milliseconds(1500);
  std::chrono::steady_clock::time_point start;
  auto errors = onRanks(3, [&](int r) {
    TcpBootstrap b(id, r, 3, timeout);
    b.barrier();
    if (r == 0) start = std::chrono::steady_clock::now();
    // Ranks 0 and 2 keep everyone; rank 1 counts rank 2 out.
    b.shrink(r == 1 ? std::vector<int>{2} : std::vector<int>{});
  });
  const double seconds = secondsSince(start);
  EXPECT_LT(seconds, 1.5 * 2 + 5);
  for (int r = 0; r < 3; ++r) EXPECT_NE(errors[static_cast<size_t>(r)], "") << "rank " << r;
  EXPECT_NE(errors[0].find("rank(s) [1] did not reach rank 0"), std::string::npos) << errors[0];
}

// Shrink to the live ranks: ranks 0 and 3 of 5 are gone (their bootstraps closed, as a dead
// process's are); the others find that out together, rank 2 calling late (but within the
// timeout), and get one group {1, 2, 4}. Then a rank alive but silent is left out at the
// deadline.
TEST(TcpBootstrap, ShrinkToLiveAgreesOnWhoIsGone) {
  const int n = 5;
  UniqueIdFields id = newUniqueId("", "");
  auto errors = onRanks(n, [&](int r) {
    auto b = std::make_unique<TcpBootstrap>(id, r, n, milliseconds(4000));
    b->barrier();
    if (r == 0 || r == 3) return;
    if (r == 2) std::this_thread::sleep_for(milliseconds(500));
    std::unique_ptr<Bootstrap> rest = b->shrinkToLive();
    EXPECT_EQ(rest->processIds(), (std::vector<int>{1, 2, 4}));
    EXPECT_EQ(rest->rank(), r == 4 ? 2 : r - 1);
    std::vector<double> v{double(r)};
    rest->allReduceMax(v);
    EXPECT_EQ(v[0], 4.0);
    // Rank 4 stays alive but does not call: after the timeout the others go on without it.
    if (rest->rank() == 2) {
      std::this_thread::sleep_for(milliseconds(6000));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    std::unique_ptr<Bootstrap> two = rest->shrinkToLive();
    const double seconds = secondsSince(start);
    EXPECT_EQ(two->processIds(), (std::vector<int>{1, 2}));
    EXPECT_GT(seconds, 3.5);  // not before the timeout
    EXPECT_LT(seconds, 4.0 + 2);
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

TEST(TcpBootstrap, NoRankZeroFailsAtTheDeadlineNamingTheAddress) {
  UniqueIdFields id = newUniqueId("127.0.0.1:29631", "");
  try {
    TcpBootstrap b(id, 1, 2, milliseconds(600));
    FAIL() << "joined without rank 0";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach rank 0 at 127.0.0.1:29631"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(TcpBootstrap(id, 2, 2, milliseconds(100)), InvalidArgument);
}

// priocclCommInitCancel: joins that wait (rank 0 for a missing rank, a rank for a missing rank 0)
// end within a fraction of a second, not at their 30 s deadline; a join begun afterwards is not
// cancelled.
TEST(TcpBootstrap, CancelEndsEveryWaitingJoinPromptly) {
  UniqueIdFields id = newUniqueId("127.0.0.1:29641", "");
  UniqueIdFields noRoot = newUniqueId("127.0.0.1:29643", "");
  const auto start = std::chrono::steady_clock::now();
  std::thread canceller([] {
    std::this_thread::sleep_for(milliseconds(400));
    cancelSetups();
  });
  auto errors = onRanks(3, [&](int r) {
    if (r == 1) {  // outside any scope (another process, in effect): it hears rank 0's verdict
      TcpBootstrap b(id, 1, 3, milliseconds(30000));
      return;
    }
    SetupScope scope;
    if (r == 0)
      TcpBootstrap b(id, 0, 3, milliseconds(30000));  // rank 2 of 3 never comes
    else
      TcpBootstrap b(noRoot, 1, 2, milliseconds(30000));  // rank 0 never comes
  });
  canceller.join();
  const double seconds = secondsSince(start);
  EXPECT_LT(seconds, 2.0);
  EXPECT_NE(errors[0].find("rank 0's creation was cancelled"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("rank 0 says: rank 0's creation was cancelled"), std::string::npos)
      << errors[1];
  EXPECT_NE(errors[2].find("cancelled"), std::string::npos) << errors[2];
  // A scope begun after the cancel is not cancelled: it fails at its own deadline, as before.
  SetupScope later;
  try {
    TcpBootstrap b(noRoot, 1, 2, milliseconds(500));
    FAIL() << "joined without rank 0";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach rank 0"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(later.cancelled());
}

TEST(TcpBootstrap, OverIpv6Loopback) {
  int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 lo{};
  lo.sin6_family = AF_INET6;
  lo.sin6_addr = in6addr_loopback;
  const bool ipv6 = probe >= 0 && ::bind(probe, reinterpret_cast<sockaddr*>(&lo), sizeof lo) == 0;
  if (probe >= 0) ::close(probe);
  if (!ipv6) GTEST_SKIP() << "no IPv6 loopback on this host";
  UniqueIdFields id = newUniqueId("[::1]:29641", "");
  auto errors = onRanks(2, [&](int r) {
    TcpBootstrap b(id, r, 2, milliseconds(10000));
    int other = -1;
    b.sendRecv(1 - r, &r, 1 - r, &other, sizeof r);
    EXPECT_EQ(other, 1 - r);
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace prioccl
