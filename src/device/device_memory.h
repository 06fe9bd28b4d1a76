// The seam to device (GPU) memory for the parts of prioccl that run on the host: whether a
// user's buffer is device memory, pinned host memory to stage it in, and copies between them.
// The CUDA runtime's implementation (cuda_memory.cpp) is loaded at run time; tests install a fake
// whose "device" addresses the host cannot touch (tests/mpi/test_device_buffers.cpp).
#pragma once

#include <cstddef>
#include <utility>

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
  // Memory on the calling thread's current device (where a device collective backend such as
  // NCCL runs its ops); throws prioccl errors naming the call.
  virtual void* allocDevice(size_t bytes) = 0;
  virtual void freeDevice(void* p) noexcept = 0;
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

// Copies `bytes` from src to dst, either of which may be device memory (a plain memcpy when the
// process has no device memory or neither is).
void copyAny(void* dst, const void* src, size_t bytes);

// Device memory (DeviceMemory::allocDevice) owned for its lifetime; empty when default-built.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceMemory& memory, size_t bytes)
      : memory_(&memory), data_(memory.allocDevice(bytes)) {}
  ~DeviceBuffer() {
    if (data_) memory_->freeDevice(data_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : memory_(o.memory_), data_(o.data_) {
    o.data_ = nullptr;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(memory_, o.memory_);
    std::swap(data_, o.data_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return data_; }

 private:
  DeviceMemory* memory_ = nullptr;
  void* data_ = nullptr;
};

// Tests: installs `memory` as current() for the whole process (null: back to the real one).
void setForTesting(DeviceMemory* memory);

}  // namespace prioccl::device
