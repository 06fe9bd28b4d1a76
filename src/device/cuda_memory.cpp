// DeviceMemory over the CUDA runtime, loaded with dlopen (the build needs only its headers).
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

#include "common/dynamic_library.h"
#include "common/error.h"
#include "common/log.h"
#include "device/current_device.h"
#include "device/device_memory.h"

namespace prioccl::device {

using detail::concat;
using detail::fail;

namespace {

struct CudaApi {
  std::string missing;  // why the runtime cannot be used ("" when it can)
  decltype(&cudaPointerGetAttributes) pointerAttributes = nullptr;
  decltype(&cudaHostAlloc) hostAlloc = nullptr;
  decltype(&cudaFreeHost) freeHost = nullptr;
  decltype(&cudaMalloc) malloc = nullptr;
  decltype(&cudaFree) free = nullptr;
  decltype(&cudaMemcpyAsync) memcpyAsync = nullptr;
  decltype(&cudaStreamSynchronize) streamSynchronize = nullptr;
  decltype(&cudaGetLastError) getLastError = nullptr;
  decltype(&cudaGetDevice) getDevice = nullptr;
  decltype(&cudaSetDevice) setDevice = nullptr;
  decltype(&cudaGetErrorString) errorString = nullptr;
};

class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(const CudaApi& api) : api_(api) {}
  const char* name() const override { return "CUDA"; }

  bool isDevice(const void* p) override {
    if (!p) return false;
    cudaPointerAttributes a{};
    if (api_.pointerAttributes(&a, p) != cudaSuccess) {
      // Older runtimes fail on memory CUDA never saw (plain host memory); clear the sticky error.
      api_.getLastError();
      return false;
    }
    return a.type == cudaMemoryTypeDevice;
  }

  void* allocHost(size_t bytes) override {
    void* p = nullptr;
    check(api_.hostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable),
          concat("cudaHostAlloc of ", bytes, " bytes (pinned staging for a device buffer)"));
    return p;
  }

  void freeHost(void* p) noexcept override {
    if (p && api_.freeHost(p) != cudaSuccess) api_.getLastError();
  }

  void* allocDevice(size_t bytes) override {
    void* p = nullptr;
    check(api_.malloc(&p, bytes ? bytes : 1), concat("cudaMalloc of ", bytes, " bytes"));
    return p;
  }

  void freeDevice(void* p) noexcept override {
    if (p && api_.free(p) != cudaSuccess) api_.getLastError();
  }

  // On the calling thread's default stream: ordered after the work the thread queued on the
  // legacy default stream (PyTorch's default), yet never behind prioccl's NCCL stream
  // (non-blocking), and pinned memory makes it a DMA without a bounce buffer.
  //
  // Staging runs on prioccl's threads, whose current device is CUDA's default (0): the copy runs
  // on the device that holds the device buffer instead (its copy engine, its context), and the
  // thread gets its own device back.
  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    int device = deviceOf(dst);
    if (device < 0) device = deviceOf(src);
    CurrentDevice on(api_.getDevice, api_.setDevice, device);
    check(on.error(), concat("cudaSetDevice(", device, ")"));
    check(api_.memcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamPerThread),
          concat("cudaMemcpyAsync of ", bytes, " bytes (device ", device, ")"));
    check(api_.streamSynchronize(cudaStreamPerThread), "cudaStreamSynchronize");
  }

 private:
  void check(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return;
    api_.getLastError();
    fail(priocclUnhandledCudaError, what, ": ", api_.errorString(e));
  }

  // The device holding p, or -1 for memory of the host.
  int deviceOf(const void* p) {
    cudaPointerAttributes a{};
    if (api_.pointerAttributes(&a, p) != cudaSuccess) {
      api_.getLastError();
      return -1;
    }
    return a.type == cudaMemoryTypeDevice ? a.device : -1;
  }

  const CudaApi& api_;
};

const CudaApi& loadApi() {
  static CudaApi a;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    void* rt = detail::openCudaRuntime(&tried);
    if (!rt) {
      a.missing = concat("cannot load the CUDA runtime (", tried, ")");
      return;
    }
    std::string& m = a.missing;
    detail::bindSymbol(rt, "cudaPointerGetAttributes", &a.pointerAttributes, &m);
    detail::bindSymbol(rt, "cudaHostAlloc", &a.hostAlloc, &m);
    detail::bindSymbol(rt, "cudaFreeHost", &a.freeHost, &m);
    detail::bindSymbol(rt, "cudaMalloc", &a.malloc, &m);
    detail::bindSymbol(rt, "cudaFree", &a.free, &m);
    detail::bindSymbol(rt, "cudaMemcpyAsync", &a.memcpyAsync, &m);
    detail::bindSymbol(rt, "cudaStreamSynchronize", &a.streamSynchronize, &m);
    detail::bindSymbol(rt, "cudaGetLastError", &a.getLastError, &m);
    detail::bindSymbol(rt, "cudaGetDevice", &a.getDevice, &m);
    detail::bindSymbol(rt, "cudaSetDevice", &a.setDevice, &m);
    detail::bindSymbol(rt, "cudaGetErrorString", &a.errorString, &m);
  });
  return a;
}

}  // namespace

// The driver is loaded (device_memory.cpp), so a device pointer may exist. If the runtime cannot
// be loaded, say so once: device buffers then reach the transports as host pointers would.
DeviceMemory* cudaMemory() {
  static CudaMemory* memory = []() -> CudaMemory* {
    const CudaApi& api = loadApi();
    if (!api.missing.empty()) {
      detail::log(
          detail::LogLevel::kWarn, "the CUDA driver is loaded but ", api.missing,
          ": device buffers cannot be told from host buffers (pass host buffers, or make the "
          "runtime loadable)");
      return nullptr;
    }
    return new CudaMemory(api);  // process lifetime: ops may stage until exit
  }();
  return memory;
}

}  // namespace prioccl::device
