// The collective backend over NCCL (PRIOCCL_TRANSPORT=nccl): one ncclComm_t per communicator, each
// launch one NCCL collective on a stream of the device's highest priority, completion by a CUDA
// event the progress thread polls (never a blocking synchronisation there). Buffers are device
// memory on the device current when the communicator is created.
//
// libcudart and libnccl are loaded at run time (dlopen), only when this backend is asked for: a
// build on a machine with the CUDA toolkit still runs where no GPU driver or NCCL library is
// installed, and fails this transport alone with a message saying what is missing.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bootstrap.h"
#include "coll_backend.h"

namespace prioccl {

struct NcclApi;  // the entry points found in the loaded libraries

class NcclCollBackend final : public CollBackend {
 public:
  // Collective over `bootstrap`: rank 0's ncclUniqueId reaches every rank through it.
  explicit NcclCollBackend(Bootstrap& bootstrap);
  ~NcclCollBackend() override;
  NcclCollBackend(const NcclCollBackend&) = delete;
  NcclCollBackend& operator=(const NcclCollBackend&) = delete;

  // NCCL_VERSION_CODE of the nccl.h compiled against (not of the libnccl loaded).
  static int headerVersion();

  const char* name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool inPlaceReduceScatter() const override { return true; }
  bool deviceBuffers() const override { return true; }
  void launch(const CollLaunch& c, uint64_t cookie) override;
  size_t poll(std::vector<Completion>& out) override;
  size_t pending() const override { return inFlight_.size(); }
  void abandon() override;

  // Why this process cannot use NCCL ("" when it can): the libraries and a device, checked
  // without creating anything. For tests that skip with a reason.
  static std::string unavailable();

 private:
  void check(int ncclResult, const char* call) const;  // throws, naming NCCL's message
  void checkCuda(int cudaError, const char* call) const;

  const NcclApi& api_;
  int rank_ = 0, size_ = 1, device_ = -1;
  void* comm_ = nullptr;     // ncclComm_t
  void* stream_ = nullptr;   // cudaStream_t
  void* barrier_ = nullptr;  // one device float: a barrier is an all-reduce of it
  struct InFlight {
    uint64_t cookie;
    void* event;  // cudaEvent_t
  };
  std::vector<InFlight> inFlight_;
  std::vector<void*> spareEvents_;
  bool abandoned_ = false;
};

}  // namespace prioccl
