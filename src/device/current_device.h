// A CUDA device made current for the length of a call, on a thread whose current device may be
// another (prioccl's progress and staging threads default to device 0; a user's waiting thread has
// its own): the previous one comes back at the end. Takes the runtime's two calls as pointers,
// since prioccl loads the runtime with dlopen.
#pragma once

#include <cuda_runtime_api.h>

namespace prioccl::device {

class CurrentDevice {
 public:
  using Get = cudaError_t (*)(int*);
  using Set = cudaError_t (*)(int);
  // device < 0 leaves the thread as it is.
  CurrentDevice(Get get, Set set, int device) : set_(set) {
    if (device < 0) return;
    error_ = get(&previous_);
    if (error_ == cudaSuccess && previous_ != device) {
      error_ = set(device);
      switched_ = error_ == cudaSuccess;
    }
  }
  ~CurrentDevice() {
    if (switched_) set_(previous_);
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;
  cudaError_t error() const { return error_; }  // of cudaGetDevice/cudaSetDevice

 private:
  Set set_;
  int previous_ = -1;
  bool switched_ = false;
  cudaError_t error_ = cudaSuccess;
};

}  // namespace prioccl::device
