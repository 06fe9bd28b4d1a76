// The bootstrap over MPI (the way mpirun-launched programs and prioccl's tests start).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "bootstrap.h"

namespace prioccl {

std::string mpiErrorString(int code);

// Initialises MPI when nobody has (and finalises it when the last bootstrap that found it
// uninitialised goes), checks the thread level, and works on a private duplicate of the user's
// communicator (MPI_COMM_WORLD when null), so that prioccl's messages never match the
// application's.
class MpiBootstrap final : public Bootstrap {
 public:
  MpiBootstrap(const MPI_Comm* userComm, bool requireThreadMultiple);
  ~MpiBootstrap() override;
  MpiBootstrap(const MpiBootstrap&) = delete;
  MpiBootstrap& operator=(const MpiBootstrap&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<int> processIds() const override { return worldRanks_; }
  bool concurrentCallsAllowed() const override;
  bool usable() const override;
  std::vector<std::vector<char>> allGather(const void* data, size_t bytes) override;
  void allReduceMax(std::vector<double>& values) override;
  void barrier() override;
  std::vector<char> sameHost() override;
  void send(int peer, const void* data, size_t bytes) override;
  void recv(int peer, void* data, size_t bytes) override;
  void sendRecv(int to, const void* out, int from, void* in, size_t bytes) override;
  std::unique_ptr<Bootstrap> split(int color, int key) override;

  // A further duplicate of the private communicator, for a transport to own and free.
  MPI_Comm duplicate();

 private:
  void check(int rc, const char* call) const;  // throws priocclSystemError naming the call

  MPI_Comm comm_ = MPI_COMM_NULL;
  bool requireThreadMultiple_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> worldRanks_;  // MPI_COMM_WORLD rank of each rank (-1 where none)
};

}  // namespace prioccl
