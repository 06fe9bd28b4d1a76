// The seam to device (GPU) memory for the parts of prioccl that run on the host: whether a
// user's buffer is device memory, pinned host memory to stage it in, and copies between them.
// The CUDA runtime's implementation (cuda_memory.cpp) is loaded at run time; tests install a fake
// whose "device" addresses the host cannot touch (tests/mpi/test_device_buffers.cpp).
#pragma once

#include <cstddef>

namespace prioccl::device {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual const char* name() const = 0;
  // Whether the host cannot read p directly (device memory; managed and host memory: false).
  virtual bool isDevice(const void* p) = 0;
  // Page-locked host memory, so copies to and from devices run at full speed; throws prioccl
  // errors naming the call.
  virtual void* allocHost(size_t bytes) = 0;
  virtual void freeHost(void* p) noexcept = 0;
  // Copies `bytes` from src to dst (either may be device memory) and returns once they are there;
  // the copy is ordered after work queued on the device before it (CUDA: the calling thread's
  // default stream). Throws prioccl errors.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
};

// The device memory this process can have: null while no GPU driver is loaded in it (then no
// pointer is device memory, and prioccl asks nothing per op). Cheap enough to call per op.
DeviceMemory* current();

// For code that reads buffers on the host (the training modes' kernels): fails with
// priocclInvalidArgument naming `what` and `who` when p is device memory.
void requireHost(const void* p, const char* what, const char* who);

// Tests: installs `memory` as current() for the whole process (null: back to the real one).
void setForTesting(DeviceMemory* memory);

}  // namespace prioccl::device
