// How the ranks of a communicator reach each other before any transport exists: a few blocking
// collectives over whatever launched them (MPI today; a TCP store or a GPU library's unique id
// could be another). Set-up only: agreeing on settings, exchanging transport addresses, the
// timeline's clock, the link estimate. Nothing on the data path calls it.
//
// Every call is collective over all ranks (except send/recv, which pair with one peer) and
// blocking. A failure throws a prioccl error naming the call; ranks then fail alike only where the
// launcher's library reports the failure to all of them, as MPI does for a collective.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace prioccl {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Names this group of processes across communicators (each rank's id in the launcher's
  // world, in rank order): communicators over the same processes get the same vector.
  virtual std::vector<int> processIds() const = 0;
  // False when only one thread at a time may call the launcher's library while the application
  // runs (MPI below MPI_THREAD_MULTIPLE): then the idle engine must not call it.
  virtual bool concurrentCallsAllowed() const = 0;
  // False once the launcher's library has shut down (MPI_Finalize ran): nothing may be sent.
  virtual bool usable() const = 0;

  // Every rank's `bytes` bytes, in rank order; ranks may give different lengths.
  virtual std::vector<std::vector<char>> allGather(const void* data, size_t bytes) = 0;
  // values[i] becomes the maximum of values[i] over all ranks (same count on every rank).
  virtual void allReduceMax(std::vector<double>& values) = 0;
  virtual void barrier() = 0;
  // One flag per rank: 1 where that rank shares this rank's host (and so its memory).
  virtual std::vector<char> sameHost() = 0;
  // Blocking point-to-point messages of exactly `bytes` bytes.
  virtual void send(int peer, const void* data, size_t bytes) = 0;
  virtual void recv(int peer, void* data, size_t bytes) = 0;
  // Sends `out` to `to` while receiving as many bytes from `from` (a ring shift without
  // deadlock).
  virtual void sendRecv(int to, const void* out, int from, void* in, size_t bytes) = 0;
  // Collective: the ranks with the same color >= 0 form a new group, ordered by key (ties by rank
  // here); a rank with a negative color gets nullptr.
  virtual std::unique_ptr<Bootstrap> split(int color, int key) = 0;
  // Called by every rank not in `excluded` (ascending or not, each rank once; the excluded ranks
  // do not call it, and may be dead): a new group of the others, renumbered in rank order, that
  // never uses this group's collectives (its rank 0 may be among the excluded). Throws
  // InvalidUsage where the launcher's library cannot leave ranks out (MPI).
  virtual std::unique_ptr<Bootstrap> shrink(const std::vector<int>& excluded);
  // Called by every live rank after a failure, none knowing for sure who is gone: the live ranks
  // find out together and form one group of them, renumbered in rank order; every caller gets
  // the same members, or fails. A rank still alive but not calling is waited for until the
  // timeout, then left out. Same refusal as shrink.
  virtual std::unique_ptr<Bootstrap> shrinkToLive();
};

// What the links between ring neighbours can do, measured with a few blocking exchanges over
// the bootstrap. Collective; every rank gets the slowest rank's figures, so tuning derived from
// them agrees.
struct LinkEstimate {
  double bytesPerSecond = 0;  // 0 with one rank
  double latencySeconds = 0;
  int nranks = 1;
};
LinkEstimate measureRingLink(Bootstrap& bootstrap);

}  // namespace prioccl
