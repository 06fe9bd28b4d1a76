// The seam to device (GPU) memory for the parts of prioccl that run on the host: whether a
// user's buffer is device memory, pinned host memory to stage it in, and copies between them.
// The CUDA runtime's implementation (cuda_memory.cpp) is loaded at run time; tests install a fake
// whose "device" addresses the host cannot touch (tests/mpi/test_device_buffers.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

namespace prioccl::device {

// An op's place in a user's device stream (docs/usage.md, "Streams"): made on the submitting
// thread when the op's buffers are device memory; it is ready once the work queued on the stream
// before the op has finished, and only then does the op enter the engine (api/stream_gate.h).
class StreamFence {
 public:
  virtual ~StreamFence() = default;
  // Whether that work has finished (never blocks; an error of the device counts as finished, and
  // the op's copies or launches report it).
  virtual bool ready() = 0;
};

// A user's stream held, on the device, until release(): the stream's work queued after the hold
// waits for an op's end (NCCL's order for later work). Released whether the op succeeded or
// failed, so that a stream never stays stuck; idempotent, any thread; the destructor releases.
class StreamHold {
 public:
  virtual ~StreamHold() = default;
  virtual void release() noexcept = 0;
};

// The stream the calling thread's device-buffer ops are ordered on (priocclSetStream): a
// cudaStream_t, null for CUDA's legacy default stream (the initial value, per thread); `holds`:
// the stream's later work waits for each op too (NCCL's semantics; ops on it then run in turn).
struct ThreadStream {
  void* stream = nullptr;
  bool holds = false;
};
void setStream(const ThreadStream& s);
const ThreadStream& stream();

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
  // As copy, on prioccl's own stream, ordered after nothing the user queued: the staging of an op
  // whose StreamFence the caller has waited for. (Ordered after the user's default stream, the
  // copy would wait for the very op it stages where that stream waits for the op.)
  virtual void stageCopy(void* dst, const void* src, size_t bytes) = 0;
  // The fence of an op submitted now on `stream` (a cudaStream_t; null: the legacy default
  // stream); null when the stream has nothing left to run. Throws prioccl errors naming the call.
  virtual std::shared_ptr<StreamFence> fence(void* stream) = 0;
  // Holds `stream` from now until the result's release(). Throws prioccl errors naming the call.
  virtual std::shared_ptr<StreamHold> hold(void* stream) = 0;
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
