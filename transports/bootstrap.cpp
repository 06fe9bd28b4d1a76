#include "bootstrap.h"

#include <algorithm>
#include <chrono>

#include "common/error.h"

namespace prioccl {

std::unique_ptr<Bootstrap> Bootstrap::shrinkToLive() {
  return shrink({});  // the refusal below
}

std::unique_ptr<Bootstrap> Bootstrap::shrink(const std::vector<int>&) {
  detail::fail(priocclInvalidUsage,
               "shrink: this communicator was made over MPI (priocclCommInitWorld / InitMPI), and "
               "MPI cannot leave ranks out of its collectives (Open MPI 4.1 has no "
               "fault-tolerant communicators): only communicators made by priocclCommInitRank "
               "(the TCP bootstrap) can shrink");
}

LinkEstimate measureRingLink(Bootstrap& bootstrap) {
  LinkEstimate e;
  const int rank = bootstrap.rank();
  e.nranks = bootstrap.size();
  if (e.nranks == 1) return e;
  const int next = (rank + 1) % e.nranks, prev = (rank + e.nranks - 1) % e.nranks;
  constexpr int kSmallRounds = 16, kBigRounds = 3;
  constexpr size_t kBig = 1 << 20;  // long enough to see bandwidth, short enough for slow links
  std::vector<char> out(kBig, 1), in(kBig);
  auto exchange = [&](size_t bytes, int rounds) {
    bootstrap.barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < rounds; ++i) bootstrap.sendRecv(next, out.data(), prev, in.data(), bytes);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / rounds;
  };
  exchange(kBig, 1);  // warm-up: connections, registration
  double latency = exchange(8, kSmallRounds);
  double big = exchange(kBig, kBigRounds);
  std::vector<double> worst = {latency, -static_cast<double>(kBig) / std::max(big, 1e-9)};
  bootstrap.allReduceMax(worst);
  e.latencySeconds = worst[0];
  e.bytesPerSecond = -worst[1];
  return e;
}

}  // namespace prioccl
