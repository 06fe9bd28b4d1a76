// The bootstrap seam without MPI: an in-process bootstrap whose ranks are threads drives the
// link estimate, the transport factory's checks and (with UCX) a whole UCX transport.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "factory.h"
#include "prioccl/prioccl.hpp"
#include "tcp/tcp_transport.h"

namespace {

using prioccl::Bootstrap;

// State shared by the ranks (threads) of one in-process group.
class Hub {
 public:
  explicit Hub(int n) : n_(n), slots_(static_cast<size_t>(n)) {}
  int size() const { return n_; }

  void barrier() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }
  // Each rank's contribution, visible to all once every rank has deposited.
  std::vector<std::vector<char>> exchange(int rank, std::vector<char> mine) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      slots_[static_cast<size_t>(rank)] = std::move(mine);
    }
    barrier();
    std::vector<std::vector<char>> all;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      all = slots_;
    }
    barrier();  // nobody overwrites a slot before everyone has read it
    return all;
  }
  void send(int from, int to, const void* data, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const char* p = static_cast<const char*>(data);
    queues_[{from, to}].emplace_back(p, p + bytes);
    cv_.notify_all();
  }
  std::vector<char> recv(int from, int to) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto& q = queues_[{from, to}];
    cv_.wait(lock, [&] { return !q.empty(); });
    std::vector<char> message = std::move(q.front());
    q.pop_front();
    return message;
  }

 private:
  const int n_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::vector<char>> slots_;
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> queues_;
};

class ThreadBootstrap final : public Bootstrap {
 public:
  ThreadBootstrap(Hub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return hub_.size(); }
  std::vector<int> processIds() const override {
    std::vector<int> ids(static_cast<size_t>(hub_.size()));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int>(i);
    return ids;
  }
  bool concurrentCallsAllowed() const override { return true; }
  bool usable() const override { return true; }
  std::vector<std::vector<char>> allGather(const void* data, size_t bytes) override {
    const char* p = static_cast<const char*>(data);
    return hub_.exchange(rank_, std::vector<char>(p, p + bytes));
  }
  void allReduceMax(std::vector<double>& values) override {
    std::vector<char> mine(values.size() * sizeof(double));
    std::memcpy(mine.data(), values.data(), mine.size());
    for (const auto& theirs : hub_.exchange(rank_, mine)) {
      ASSERT_EQ(theirs.size(), mine.size()) << "ranks reduce different counts";
      for (size_t i = 0; i < values.size(); ++i) {
        double v;
        std::memcpy(&v, theirs.data() + i * sizeof(double), sizeof v);
        values[i] = std::max(values[i], v);
      }
    }
  }
  void barrier() override { hub_.barrier(); }
  std::vector<char> sameHost() override { return std::vector<char>(hub_.size(), 1); }
  void send(int peer, const void* data, size_t bytes) override {
    hub_.send(rank_, peer, data, bytes);
  }
  void recv(int peer, void* data, size_t bytes) override {
    std::vector<char> m = hub_.recv(peer, rank_);
    if (m.size() != bytes)
      throw prioccl::SystemError("thread bootstrap: " + std::to_string(m.size()) +
                                 " bytes arrived, " + std::to_string(bytes) + " expected");
    std::memcpy(data, m.data(), bytes);
  }
  void sendRecv(int to, const void* out, int from, void* in, size_t bytes) override {
    send(to, out, bytes);  // buffered: never waits for the peer
    recv(from, in, bytes);
  }  // Not needed by these tests (the UCX transport's bootstrap use): communicator splits are
  // tested over MPI (test_comm_split).
  std::unique_ptr<Bootstrap> split(int, int) override {
    ADD_FAILURE() << "ThreadBootstrap::split is not implemented";
    return nullptr;
  }

 private:
  Hub& hub_;
  const int rank_;
};

// Runs body(bootstrap) on n threads; returns each rank's exception message ("" when none).
std::vector<std::string> onThreads(int n, const std::function<void(Bootstrap&)>& body) {
  Hub hub(n);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      ThreadBootstrap bootstrap(hub, r);
      try {
        body(bootstrap);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

TEST(Bootstrap, RingLinkEstimateAgreesOnEveryRank) {
  constexpr int kRanks = 3;
  std::vector<prioccl::LinkEstimate> seen(kRanks);
  auto errors = onThreads(kRanks, [&](Bootstrap& b) { seen[b.rank()] = measureRingLink(b); });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(seen[r].nranks, kRanks);
    EXPECT_GT(seen[r].bytesPerSecond, 0);
    EXPECT_GT(seen[r].latencySeconds, 0);
    // The slowest rank's figures, bit for bit, so that tuning derived from them agrees.
    EXPECT_EQ(seen[r].bytesPerSecond, seen[0].bytesPerSecond) << "rank " << r;
    EXPECT_EQ(seen[r].latencySeconds, seen[0].latencySeconds) << "rank " << r;
  }
}

TEST(Bootstrap, SingleRankLinkEstimateIsEmpty) {
  auto errors = onThreads(1, [](Bootstrap& b) {
    prioccl::LinkEstimate e = measureRingLink(b);
    EXPECT_EQ(e.nranks, 1);
    EXPECT_EQ(e.bytesPerSecond, 0);
  });
  EXPECT_EQ(errors[0], "");
}

TEST(TransportFactory, MpiTransportNeedsAnMpiBootstrap) {
  auto errors = onThreads(1, [](Bootstrap& b) {
    try {
      prioccl::makeTransport(priocclTransportMpi, b, {});
      ADD_FAILURE() << "an MPI transport over a non-MPI bootstrap was built";
    } catch (const prioccl::InvalidUsage& e) {
      EXPECT_NE(std::string(e.what()).find("PRIOCCL_TRANSPORT=mpi"), std::string::npos) << e.what();
    }
  });
  EXPECT_EQ(errors[0], "");
}

TEST(TransportFactory, UnknownKindIsAnInvalidArgument) {
  auto errors = onThreads(1, [](Bootstrap& b) {
    EXPECT_THROW(prioccl::makeTransport(static_cast<priocclTransport_t>(7), b, {}),
                 prioccl::InvalidArgument);
  });
  EXPECT_EQ(errors[0], "");
}

#ifdef PRIOCCL_HAVE_UCX
// The UCX transport bootstraps over any Bootstrap: two ranks in one process (two UCX workers)
// exchange 1 MiB both ways, as the engine would post it.
void ucxExchange(const prioccl::TransportOptions& options) {
  constexpr size_t kBytes = 1 << 20;
  auto errors = onThreads(2, [&](Bootstrap& b) {
    std::unique_ptr<prioccl::Transport> t = prioccl::makeTransport(priocclTransportUcx, b, options);
    ASSERT_EQ(t->rank(), b.rank());
    ASSERT_EQ(t->size(), 2);
    const int peer = 1 - b.rank();
    std::vector<unsigned char> out(kBytes), in(kBytes, 0);
    for (size_t i = 0; i < kBytes; ++i) out[i] = static_cast<unsigned char>(i * 7 + b.rank());
    t->postRecv(peer, 5, in.data(), kBytes, 1);
    t->postSend(peer, 5, out.data(), kBytes, 2, prioccl::SendCompletion::kEndToEnd);
    std::vector<prioccl::Completion> done;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (done.size() < 2 && std::chrono::steady_clock::now() < deadline) {
      if (t->poll(done) == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    ASSERT_EQ(done.size(), 2u) << "transfers not finished within 60 s";
    for (const auto& c : done) {
      EXPECT_TRUE(c.ok) << c.error;
      if (c.cookie == 1) {
        EXPECT_EQ(c.bytes, kBytes);
      }
    }
    for (size_t i = 0; i < kBytes; ++i)
      if (in[i] != static_cast<unsigned char>(i * 7 + peer)) {
        ADD_FAILURE() << "byte " << i << " from rank " << peer << " is " << int(in[i]);
        break;
      }
    b.barrier();  // both finished before either closes its endpoints
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

TEST(TransportFactory, UcxTransportOverAThreadBootstrap) {
  ucxExchange({});
}

// The placement's device choice reaches UCX as its NET_DEVICES (topology/placement.h).
TEST(TransportFactory, UcxTransportOnAChosenNetDevice) {
  prioccl::TransportOptions options;
  options.ucxNetDevices = "lo";
  ucxExchange(options);
}
#endif

// The TCP transport (transports/tcp): a mesh of sockets over loopback between threads.
using prioccl::Completion;
using prioccl::SendCompletion;
using prioccl::Transport;

// Polls until `want` completions arrived (or 60 s passed).
std::vector<Completion> pollFor(Transport& t, size_t want) {
  std::vector<Completion> done;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (done.size() < want && std::chrono::steady_clock::now() < deadline)
    if (t.poll(done) == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  return done;
}

unsigned char pattern(size_t i, int from, int to) {
  return static_cast<unsigned char>(i * 13 + from * 5 + to);
}

// Both ways a send may complete: at the receiver's acknowledgement (no send buffer cap), or once
// written into a capped socket buffer (PRIOCCL_SOCKET_SNDBUF).
class TcpTransportBoth : public ::testing::TestWithParam<size_t> {};
INSTANTIATE_TEST_SUITE_P(Sndbuf, TcpTransportBoth, ::testing::Values(size_t{0}, size_t{16} << 10));

TEST_P(TcpTransportBoth, EveryPairExchangesEverySizeReceivesPostedBeforeOrAfter) {
  constexpr int kRanks = 3;
  const std::vector<size_t> sizes = {0, 100, 5000, 32 << 10, 1 << 20};
  prioccl::TransportOptions options;
  options.socketSndbuf = GetParam();
  auto errors = onThreads(kRanks, [&](Bootstrap& b) {
    std::unique_ptr<Transport> t = prioccl::makeTransport(priocclTransportTcp, b, options);
    const int me = b.rank();
    ASSERT_STREQ(t->name(), "tcp");
    std::vector<std::vector<unsigned char>> out, in;
    uint64_t cookie = 0;
    size_t posted = 0;
    std::map<uint64_t, size_t> expected;  // receive cookie -> its message's size
    // Odd tags: receives posted first; even tags: sends first, then a barrier, so that the
    // messages wait as unexpected ones before their receives come.
    for (int peer = 0; peer < kRanks; ++peer)  // the rank itself too
      for (size_t k = 0; k < sizes.size(); ++k) {
        in.emplace_back(sizes[k] + 8, 0xEE);  // 8 spare bytes must stay untouched
        expected[1000 + cookie] = sizes[k];
        t->postRecv(peer, 2 * k + 1, in.back().data(), sizes[k] + 8, 1000 + cookie++);
        ++posted;
      }
    for (int peer = 0; peer < kRanks; ++peer)
      for (size_t k = 0; k < sizes.size(); ++k)
        for (uint64_t tag : {2 * k, 2 * k + 1}) {
          out.emplace_back(sizes[k]);
          for (size_t i = 0; i < sizes[k]; ++i) out.back()[i] = pattern(i, me, peer);
          t->postSend(peer, tag, out.back().data(), sizes[k], 5000 + cookie++,
                      k % 2 ? SendCompletion::kEndToEnd : SendCompletion::kBuffered);
          ++posted;
        }
    std::vector<Completion> done = pollFor(*t, 0);
    b.barrier();
    for (int peer = 0; peer < kRanks; ++peer)
      for (size_t k = 0; k < sizes.size(); ++k) {
        in.emplace_back(sizes[k] + 8, 0xEE);
        expected[1000 + cookie] = sizes[k];
        t->postRecv(peer, 2 * k, in.back().data(), sizes[k] + 8, 1000 + cookie++);
        ++posted;
      }
    for (const Completion& c : pollFor(*t, posted - done.size())) done.push_back(c);
    ASSERT_EQ(done.size(), posted) << "rank " << me << ": transfers not finished within 60 s";
    EXPECT_EQ(t->pending(), 0u);
    for (const Completion& c : done) EXPECT_TRUE(c.ok) << c.error;
    // Receive buffers, in posting order: odd tags per (peer, size), then even ones.
    size_t at = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (int peer = 0; peer < kRanks; ++peer)
        for (size_t k = 0; k < sizes.size(); ++k, ++at) {
          const auto& got = in[at];
          size_t bad = got.size();
          for (size_t i = 0; i < sizes[k] && bad == got.size(); ++i)
            if (got[i] != pattern(i, peer, me)) bad = i;
          for (size_t i = sizes[k]; i < got.size() && bad == got.size(); ++i)
            if (got[i] != 0xEE) bad = i;
          EXPECT_EQ(bad, got.size()) << "rank " << me << " from " << peer << ", " << sizes[k]
                                     << " bytes, pass " << pass << ": byte " << bad << " wrong";
        }
    // A receive reports its message's size (not its buffer's, 8 bytes more).
    size_t receives = 0;
    for (const Completion& c : done)
      if (auto it = expected.find(c.cookie); it != expected.end()) {
        EXPECT_EQ(c.bytes, it->second) << "rank " << me << ", receive " << c.cookie;
        ++receives;
      }
    EXPECT_EQ(receives, expected.size());
    b.barrier();  // every rank finished before any closes its sockets
    EXPECT_TRUE(t->quiesce());
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Reads take a header with what follows it into one buffer (several short messages at once) and
// the rest of a payload straight into its receive: a stream of random sizes (headers and payloads
// split across reads), received in order with receives posted before, after and while their
// messages arrive.
TEST_P(TcpTransportBoth, RandomSizesStreamArrivesWholeWhereverReadsSplitIt) {
  constexpr int kMessages = 1500;
  std::mt19937 sizing(12345);
  std::vector<size_t> sizes(kMessages);
  // Short ones (several per read), ones around the 4 KiB read-ahead, and long ones.
  for (size_t& s : sizes) {
    unsigned kind = sizing() % 3;
    s = kind == 0 ? sizing() % 300 : kind == 1 ? 3900 + sizing() % 400 : sizing() % 200000;
  }
  // The receiver polls on until the sender has every completion, as an engine does: a long
  // send completes only with its acknowledgement, and a receiver that stopped polling after its
  // last receive could still hold one, unwritten (seen under load, 2026-11-29, the last send's,
  // 1 run in ~150; likely because the sender reads nothing while it posts, so the receiver's
  // acknowledgements back up until its socket refuses more). The sender says it is done even
  // when it failed, so that neither waits for the other past the failure.
  std::atomic<bool> senderDone{false};
  prioccl::TransportOptions options;
  options.socketSndbuf = GetParam();
  auto errors = onThreads(2, [&](Bootstrap& b) {
    std::unique_ptr<Transport> t = prioccl::makeTransport(priocclTransportTcp, b, options);
    const int me = b.rank(), peer = 1 - me;
    std::vector<std::vector<unsigned char>> bufs(kMessages);
    if (me == 0) {
      for (int i = 0; i < kMessages; ++i) {
        bufs[i].resize(sizes[i]);
        for (size_t j = 0; j < sizes[i]; ++j) bufs[i][j] = pattern(j, i, 7);
        t->postSend(peer, i % 5, bufs[i].data(), sizes[i], i,
                    i % 3 ? SendCompletion::kEndToEnd : SendCompletion::kBuffered);
      }
      EXPECT_EQ(pollFor(*t, kMessages).size(), size_t{kMessages}) << "sends not done in 60 s";
      senderDone = true;
    } else {
      std::mt19937 posting(99);
      std::vector<Completion> done;
      int next = 0;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (done.size() < kMessages && std::chrono::steady_clock::now() < deadline) {
        if (next < kMessages && posting() % 2) {
          bufs[next].assign(sizes[next] + 4, 0xEE);
          t->postRecv(peer, next % 5, bufs[next].data(), sizes[next] + 4, next);
          ++next;
        } else if (t->poll(done) == 0 && next == kMessages) {
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
      }
      EXPECT_EQ(done.size(), size_t{kMessages}) << "receives not done in 60 s";
      std::vector<Completion> more;
      while (!senderDone && std::chrono::steady_clock::now() < deadline + std::chrono::seconds(10))
        if (t->poll(more) == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      EXPECT_TRUE(more.empty()) << more.size() << " completions more than the receives posted";
      for (const Completion& c : done) {
        ASSERT_TRUE(c.ok) << c.error;
        ASSERT_EQ(c.bytes, sizes[c.cookie]) << "message " << c.cookie;
        const auto& got = bufs[c.cookie];
        size_t bad = got.size();
        for (size_t j = 0; j < got.size() && bad == got.size(); ++j)
          if (got[j] != (j < sizes[c.cookie] ? pattern(j, int(c.cookie), 7) : 0xEE)) bad = j;
        EXPECT_EQ(bad, got.size()) << "message " << c.cookie << " (" << sizes[c.cookie]
                                   << " bytes): byte " << bad << " wrong";
      }
    }
    b.barrier();
    EXPECT_TRUE(t->quiesce());
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// With a capped send buffer a send that would otherwise wait for the receiver's acknowledgement
// completes once its socket has taken it: here while the receiver does not poll at all. Without
// the cap it completes only after the receiver has read it.
TEST(TcpTransport, CappedSendBufferCompletesSendsOnceWritten) {
  for (size_t sndbuf : {size_t{16} << 10, size_t{0}}) {
    prioccl::TransportOptions options;
    options.socketSndbuf = sndbuf;
    auto errors = onThreads(2, [&](Bootstrap& b) {
      std::unique_ptr<Transport> t = prioccl::makeTransport(priocclTransportTcp, b, options);
      std::vector<char> message(32 << 10, 'm');
      if (b.rank() == 0) {
        t->postSend(1, 5, message.data(), message.size(), 1, SendCompletion::kEndToEnd);
        std::vector<Completion> done;
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        while (done.empty() && std::chrono::steady_clock::now() < until)
          if (t->poll(done) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
        if (sndbuf > 0)
          EXPECT_EQ(done.size(), 1u) << "a capped socket's send waited for the receiver";
        else
          EXPECT_TRUE(done.empty()) << "completed before the receiver had read it";
        b.barrier();  // rank 1 reads from now on
        if (sndbuf == 0) done = pollFor(*t, 1);
        EXPECT_EQ(done.size(), 1u);
        for (const Completion& c : done) EXPECT_TRUE(c.ok) << c.error;
      } else {
        b.barrier();
        std::vector<char> got(message.size());
        t->postRecv(0, 5, got.data(), got.size(), 2);
        EXPECT_EQ(pollFor(*t, 1).size(), 1u);
        EXPECT_EQ(got, message);
      }
      b.barrier();
      EXPECT_TRUE(t->quiesce());
    });
    EXPECT_EQ(errors[0], "") << "sndbuf " << sndbuf;
    EXPECT_EQ(errors[1], "") << "sndbuf " << sndbuf;
  }
}

TEST(TcpTransport, LongerMessageThanItsReceiveFailsThatReceiveOnly) {
  auto errors = onThreads(2, [&](Bootstrap& b) {
    std::unique_ptr<Transport> t = prioccl::makeTransport(priocclTransportTcp, b, {});
    std::vector<char> big(4096, 'x'), small(100), after(10);
    if (b.rank() == 0) {
      t->postSend(1, 7, big.data(), big.size(), 1, SendCompletion::kEndToEnd);
      t->postSend(1, 8, big.data(), 10, 2, SendCompletion::kEndToEnd);
      auto done = pollFor(*t, 2);
      ASSERT_EQ(done.size(), 2u);
      for (const Completion& c : done) EXPECT_TRUE(c.ok) << c.error;
    } else {
      t->postRecv(0, 7, small.data(), small.size(), 1);
      t->postRecv(0, 8, after.data(), after.size(), 2);
      auto done = pollFor(*t, 2);
      ASSERT_EQ(done.size(), 2u);
      for (const Completion& c : done) {
        if (c.cookie == 1) {
          EXPECT_FALSE(c.ok);
          EXPECT_NE(c.error.find("4096 bytes from rank 0"), std::string::npos) << c.error;
          EXPECT_NE(c.error.find("100 bytes"), std::string::npos) << c.error;
        } else {
          EXPECT_TRUE(c.ok) << c.error;  // the stream goes on
          EXPECT_EQ(c.bytes, 10u);
          EXPECT_EQ(after[9], 'x');
        }
      }
    }
    b.barrier();
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// cancelAll() (the communicator failed) withdraws sends too: the engine forgets their cookies, so
// none may be reported afterwards, not one that finished unreported, not one whose
// acknowledgement comes later; a send not yet begun never goes, one partly written is finished,
// and the stream goes on for the abort notice that follows.
TEST(TcpTransport, CancelAllWithdrawsSendsAndTheStreamGoesOn) {
  constexpr size_t kBig = 32 << 20;  // far more than loopback's socket buffers: it stays partial
  auto errors = onThreads(2, [&](Bootstrap& b) {
    std::unique_ptr<Transport> t = prioccl::makeTransport(priocclTransportTcp, b, {});
    std::vector<char> big(kBig), small(16, 's'), last(10, 'z');
    for (size_t i = 0; i < kBig; ++i) big[i] = static_cast<char>(i * 7);
    if (b.rank() == 0) {
      t->postSend(1, 1, small.data(), small.size(), 1, SendCompletion::kBuffered);  // written
      t->postSend(1, 2, big.data(), kBig, 2, SendCompletion::kEndToEnd);  // partly written
      t->postSend(1, 3, small.data(), small.size(), 3, SendCompletion::kBuffered);  // queued
      t->cancelAll();
      EXPECT_EQ(t->pending(), 0u);
      b.barrier();  // rank 1 starts reading only now
      t->postSend(1, 9, last.data(), last.size(), 7, SendCompletion::kDelivered);
      // No ASSERT before a barrier: a rank that returned early would leave the other waiting.
      auto done = pollFor(*t, 1);
      EXPECT_EQ(done.size(), 1u);
      for (const Completion& c : done) {
        EXPECT_EQ(c.cookie, 7u);
        EXPECT_TRUE(c.ok) << c.error;
      }
      // Rank 1 has acknowledged the big send meanwhile: still nothing reported for it.
      b.barrier();
      std::vector<Completion> more;
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
      while (std::chrono::steady_clock::now() < until) t->poll(more);
      EXPECT_TRUE(more.empty()) << "cookie " << more[0].cookie;
      EXPECT_EQ(t->pending(), 0u);
    } else {
      b.barrier();
      std::vector<char> got(kBig), s1(16), s3(16), l(10);
      t->postRecv(0, 1, s1.data(), s1.size(), 1);
      t->postRecv(0, 2, got.data(), kBig, 2);
      t->postRecv(0, 3, s3.data(), s3.size(), 3);
      t->postRecv(0, 9, l.data(), l.size(), 9);
      auto done = pollFor(*t, 3);  // tags 1, 2 and 9, in that order; tag 3 never came
      std::vector<uint64_t> cookies;
      for (const Completion& c : done) {
        cookies.push_back(c.cookie);
        EXPECT_TRUE(c.ok) << c.error;
      }
      EXPECT_EQ(cookies, (std::vector<uint64_t>{1, 2, 9}));
      EXPECT_EQ(got, big);
      EXPECT_EQ(l, last);
      EXPECT_EQ(t->pending(), 1u);  // the receive of tag 3
      b.barrier();
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// A send the socket cannot take whole leaves bytes to write: the engine may still sleep on the
// event descriptor (armEvents), which stays quiet while the peer reads nothing and becomes
// readable once the socket drains, so a progress thread sleeps through a full socket instead of
// polling it (before, armEvents refused, and the engine spun).
TEST(TcpTransport, UnwrittenBytesWakeTheSleeperOnceTheSocketDrains) {
  constexpr size_t kBig = 32 << 20;  // far more than loopback's socket buffers: it stays partial
  auto readable = [](int fd, int ms) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, ms) > 0 && (p.revents & POLLIN);
  };
  auto errors = onThreads(2, [&](Bootstrap& b) {
    std::unique_ptr<Transport> t = prioccl::makeTransport(priocclTransportTcp, b, {});
    std::vector<char> big(kBig, 'b');
    if (b.rank() == 0) {
      t->postSend(1, 1, big.data(), kBig, 1, SendCompletion::kEndToEnd);
      std::vector<Completion> none;
      for (int i = 0; i < 3; ++i) t->poll(none);  // writes what the socket takes
      EXPECT_TRUE(none.empty());
      EXPECT_TRUE(t->armEvents()) << "bytes left to write kept the engine polling";
      EXPECT_FALSE(readable(t->eventFd(), 200)) << "woken although the peer reads nothing";
      b.barrier();  // rank 1 reads from now on
      EXPECT_TRUE(readable(t->eventFd(), 10000)) << "not woken when the socket drained";
      auto done = pollFor(*t, 1);
      EXPECT_EQ(done.size(), 1u);
      for (const Completion& c : done) EXPECT_TRUE(c.ok) << c.error;
      EXPECT_TRUE(t->armEvents());  // nothing left to write: back to reads only
      EXPECT_FALSE(readable(t->eventFd(), 100)) << "an idle socket's writability woke it";
    } else {
      b.barrier();
      std::vector<char> got(kBig);
      t->postRecv(0, 1, got.data(), kBig, 1);
      auto done = pollFor(*t, 1);
      EXPECT_EQ(done.size(), 1u);
      EXPECT_EQ(got, big);
    }
    b.barrier();
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// A peer whose connection ends without its bye (its process died: the kernel closed the socket)
// fails everything that waits on it, naming it.
TEST(TcpTransport, PeerGoneWithoutByeFailsWhatWaitsForItNamingIt) {
  auto errors = onThreads(2, [&](Bootstrap& b) {
    std::unique_ptr<Transport> t = prioccl::makeTransport(priocclTransportTcp, b, {});
    std::vector<char> buf(64);
    if (b.rank() == 1) {
      b.barrier();
      t.reset();  // closes its sockets without quiesce(): no bye, as a killed process
      b.barrier();
      return;
    }
    t->postRecv(1, 3, buf.data(), buf.size(), 9);
    b.barrier();
    b.barrier();
    auto done = pollFor(*t, 1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_FALSE(done[0].ok);
    EXPECT_TRUE(done[0].peerLost);
    EXPECT_NE(done[0].error.find("rank 1"), std::string::npos) << done[0].error;
    EXPECT_NE(done[0].error.find("without a goodbye"), std::string::npos) << done[0].error;
    // Later transfers with that peer fail at once, with the same reason.
    t->postSend(1, 4, buf.data(), 8, 10, SendCompletion::kBuffered);
    done = pollFor(*t, 1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_FALSE(done[0].ok);
    EXPECT_NE(done[0].error.find("without a goodbye"), std::string::npos) << done[0].error;
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// A peer that closes in order (quiesce: its communicator is destroyed) fails nothing that only
// waits for it, as over MPI; a send to it fails, saying it has left.
TEST(TcpTransport, PeerThatLeftInOrderLeavesReceivesWaitingAndFailsSends) {
  auto errors = onThreads(2, [&](Bootstrap& b) {
    std::unique_ptr<Transport> t = prioccl::makeTransport(priocclTransportTcp, b, {});
    std::vector<char> buf(64);
    if (b.rank() == 1) {
      b.barrier();
      EXPECT_TRUE(t->quiesce());
      b.barrier();
      return;
    }
    t->postRecv(1, 3, buf.data(), buf.size(), 9);
    b.barrier();
    b.barrier();
    std::vector<Completion> done;
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    while (std::chrono::steady_clock::now() < until) t->poll(done);  // reads the bye and the end
    EXPECT_TRUE(done.empty()) << done[0].error;
    EXPECT_EQ(t->pending(), 1u);
    t->postSend(1, 4, buf.data(), 8, 10, SendCompletion::kBuffered);
    done = pollFor(*t, 1);
    ASSERT_EQ(done.size(), 1u);
    EXPECT_FALSE(done[0].ok);
    EXPECT_NE(done[0].error.find("has left"), std::string::npos) << done[0].error;
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// The dial order: loopback first only for a peer on this host, and never this rank's own
// listener (a peer in another network namespace may draw the same port: dialling it on loopback
// reached our own listener, which waited for a hello as we did, until the set-up deadline).
TEST(TcpTransport, DialOrderPutsLoopbackFirstOnlyOnOneHostAndSkipsOurOwnListener) {
  auto ip = [](const char* text) {
    in_addr a{};
    inet_pton(AF_INET, text, &a);
    return a.s_addr;
  };
  const uint32_t lo = ip("127.0.0.1"), eth = ip("198.18.0.3"), mineEth = ip("198.18.0.2");
  const std::vector<uint32_t> peer = {eth, lo}, mine = {mineEth, lo};
  using V = std::vector<uint32_t>;
  EXPECT_EQ(prioccl::dialOrder(peer, 4000, true, 5000, mine), (V{lo, eth}));
  EXPECT_EQ(prioccl::dialOrder(peer, 4000, false, 5000, mine), (V{eth, lo}));
  // The same port as ours: its loopback is us; its other address is not one of ours.
  EXPECT_EQ(prioccl::dialOrder(peer, 5000, true, 5000, mine), (V{eth}));
  EXPECT_EQ(prioccl::dialOrder(peer, 5000, false, 5000, mine), (V{eth}));
  // An address of ours with our port is us too, whatever the peer says.
  EXPECT_EQ(prioccl::dialOrder({mineEth, eth}, 5000, false, 5000, mine), (V{eth}));
  EXPECT_EQ(prioccl::dialOrder({mineEth, eth}, 4000, false, 5000, mine), (V{mineEth, eth}));
}

TEST(TcpTransport, InterfaceFilterFollowsNcclSocketIfnameSyntax) {
  using prioccl::interfaceMatches;
  EXPECT_TRUE(interfaceMatches("", "eth0"));
  EXPECT_TRUE(interfaceMatches("eth", "eth0"));
  EXPECT_TRUE(interfaceMatches("ib,eth", "eth1"));
  EXPECT_FALSE(interfaceMatches("ib,eth", "lo"));
  EXPECT_FALSE(interfaceMatches("^lo,docker", "lo"));
  EXPECT_FALSE(interfaceMatches("^lo,docker", "docker0"));
  EXPECT_TRUE(interfaceMatches("^lo,docker", "eth0"));
  EXPECT_TRUE(interfaceMatches("=eth0", "eth0"));
  EXPECT_FALSE(interfaceMatches("=eth0", "eth01"));
  EXPECT_FALSE(interfaceMatches("^=eth0", "eth0"));
  EXPECT_TRUE(interfaceMatches("^=eth0", "eth01"));
}

TEST(TcpTransport, NoInterfaceMatchingTheFilterIsAClearError) {
  auto errors = onThreads(1, [](Bootstrap& b) {
    prioccl::TransportOptions options;
    options.socketIfname = "=no-such-interface9";
    prioccl::makeTransport(priocclTransportTcp, b, options);
  });
  EXPECT_NE(errors[0].find("PRIOCCL_SOCKET_IFNAME==no-such-interface9"), std::string::npos)
      << errors[0];
}

}  // namespace
