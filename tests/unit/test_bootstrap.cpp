// The bootstrap seam without MPI: an in-process bootstrap whose ranks are threads drives the
// link estimate, the transport factory's checks and (with UCX) a whole UCX transport.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "factory.h"
#include "prioccl/prioccl.hpp"

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

}  // namespace
