// The collective backend over MPI's non-blocking collectives (MPI_Iallreduce and friends) on a
// private duplicate of the user's communicator: the CPU twin of an NCCL backend, with the same
// rule (every rank starts the same collectives in the same order), so the scheduling above it is
// tested here without a GPU. PRIOCCL_TRANSPORT=mpi-coll.
#pragma once

#include <mpi.h>

#include <vector>

#include "coll_backend.h"

namespace prioccl {

class MpiCollBackend final : public CollBackend {
 public:
  // `comm` must already be a private duplicate; this object frees it.
  explicit MpiCollBackend(MPI_Comm comm);
  ~MpiCollBackend() override;
  MpiCollBackend(const MpiCollBackend&) = delete;
  MpiCollBackend& operator=(const MpiCollBackend&) = delete;

  const char* name() const override { return "mpi-coll"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void launch(const CollLaunch& c, uint64_t cookie) override;
  size_t poll(std::vector<Completion>& out) override;
  size_t pending() const override { return reqs_.size(); }
  void abandon() override;

 private:
  struct Launched {
    uint64_t cookie;
    CollLaunch c;
    bool average;  // MPI has no average: a sum, divided here once it is complete
  };
  MPI_Op mpiOp(priocclDataType_t dt, priocclRedOp_t op);  // built-in, or a user op

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> reqs_;  // parallel to launched_
  std::vector<Launched> launched_;
  std::vector<int> indices_;
  // [float16, bfloat16, float32, float64, int8, uint8][sum, prod, max, min], made on first use.
  MPI_Op userOps_[6][4];
  bool abandoned_ = false;
};

}  // namespace prioccl
