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
  const char* pollCall() const override { return "MPI_Testsome"; }
  bool pollYields() const override { return true; }
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
    bool delivered;  // a send posted SendCompletion::kDelivered (an abort notice)
  };
  void post(bool isRecv, int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie,
            bool sync, bool delivered = false);
  // Cancels and releases every request; an abort notice's is released uncancelled: it goes on.
  void withdraw();

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

}  // namespace prioccl
