// Transport over MPI point-to-point calls on a private duplicate of the user's communicator.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "transport.h"

namespace prioccl {

class MpiTransport final : public Transport {
 public:
  // `comm` must already be the private duplicate; this object frees it.
  explicit MpiTransport(MPI_Comm comm);
  ~MpiTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }
  uint64_t tagSpace() const override { return tagSpace_; }
  void postSend(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                SendCompletion completion) override;
  void postRecv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) override;
  size_t poll(std::vector<Completion>& out) override;
  size_t pending() const override { return reqs_.size(); }
  void cancelAll() override;

 private:
  struct Posted {
    uint64_t cookie;
    int peer;
    size_t bytes;
    bool isRecv;
  };
  void post(bool isRecv, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie,
            bool sync);
  void withdraw();  // cancels and releases every request

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  uint64_t tagSpace_ = 0;
  std::vector<MPI_Request> reqs_;  // parallel to posted_, compacted after each poll
  std::vector<Posted> posted_;
  std::vector<int> indices_;
  std::vector<MPI_Status> statuses_;
  std::vector<char> finished_;
  bool abandoned_ = false;  // cancelAll() ran: never free comm_ (see the destructor)
};

// Reads and validates MPI state for a communicator built on `userComm` (MPI_COMM_WORLD when null):
// initialises MPI when nobody has, checks the thread level, and duplicates the communicator.
struct MpiSession {
  MPI_Comm dup = MPI_COMM_NULL;
  bool initialisedByUs = false;
};
MpiSession openMpiSession(const MPI_Comm* userComm, bool requireThreadMultiple);
std::string mpiErrorString(int code);

// What the links between ring neighbours can do, measured with a few blocking exchanges.
// Collective; every rank gets the slowest rank's figures, so tuning derived from them agrees.
struct LinkEstimate {
  double bytesPerSecond = 0;  // 0 with one rank
  double latencySeconds = 0;
  int nranks = 1;
};
LinkEstimate measureRingLink(MPI_Comm comm);

// For each rank of `comm`, its rank in `other` (-1 where it is not in `other`).
std::vector<int> ranksIn(MPI_Comm comm, MPI_Comm other);
// The MPI_COMM_WORLD rank of each rank of `comm` (-1 where none): names the group of processes.
std::vector<int> worldRanksOf(MPI_Comm comm);

}  // namespace prioccl
