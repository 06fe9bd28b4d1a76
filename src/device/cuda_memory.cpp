// DeviceMemory over the CUDA runtime, loaded with dlopen (the build needs only its headers).
#include <cuda_runtime_api.h>

#include <cuda.h>  // types of the one driver call (cuStreamWaitValue32); nothing linked

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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
  decltype(&cudaStreamCreateWithFlags) streamCreate = nullptr;
  decltype(&cudaStreamDestroy) streamDestroy = nullptr;
  decltype(&cudaEventCreateWithFlags) eventCreate = nullptr;
  decltype(&cudaEventRecord) eventRecord = nullptr;
  decltype(&cudaEventQuery) eventQuery = nullptr;
  decltype(&cudaStreamQuery) streamQuery = nullptr;
  decltype(&cudaHostGetDevicePointer) hostDevicePointer = nullptr;
  // Optional: cudaStreamGetDevice (CUDA 12.8); without it a stream is taken to be on the
  // calling thread's current device. cuStreamWaitValue32 (the driver's): without it, a stream
  // cannot be held (hold() fails saying so).
  cudaError_t (*streamGetDevice)(cudaStream_t, int*) = nullptr;
  CUresult (*waitValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;
};

// The words users' streams wait on (cuStreamWaitValue32, "until *word >= target"): pinned host
// memory mapped for the GPU, one word per op in flight. The host releases a stream by storing the
// target; the word keeps that value, so it serves the next op at once with target + 1 (waits
// queued on it before still pass: the comparison is GEQ, wrap-safe).
class WaitWords {
 public:
  struct Word {
    uint32_t* host = nullptr;
    CUdeviceptr device = 0;
    uint32_t target = 0;
  };
  explicit WaitWords(const CudaApi& api) : api_(api) {}

  // Throws prioccl errors naming the call.
  Word take() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) grow();
    Word w = free_.back();
    free_.pop_back();
    w.target += 1;
    return w;
  }
  // After the word was released (its value is w.target).
  void give(const Word& w) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(w);
  }

 private:
  static constexpr size_t kWordsPerPage = 1024;
  void grow() {
    void* page = nullptr;
    const size_t bytes = kWordsPerPage * sizeof(uint32_t);
    cudaError_t e = api_.hostAlloc(&page, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
      api_.getLastError();
      fail(priocclUnhandledCudaError, "cudaHostAlloc of ", bytes,
           " bytes (mapped words that streams wait on): ", api_.errorString(e));
    }
    void* device = nullptr;
    e = api_.hostDevicePointer(&device, page, 0);
    if (e != cudaSuccess) {
      api_.getLastError();
      api_.freeHost(page);
      fail(priocclUnhandledCudaError, "cudaHostGetDevicePointer: ", api_.errorString(e));
    }
    // Kept for the process's life: a stream may still wait on a word when its op is long gone.
    auto* words = static_cast<uint32_t*>(page);
    for (size_t i = 0; i < kWordsPerPage; ++i) {
      words[i] = 0;
      free_.push_back({words + i, reinterpret_cast<CUdeviceptr>(device) + i * sizeof(uint32_t), 0});
    }
  }

  const CudaApi& api_;
  std::mutex mutex_;
  std::vector<Word> free_;
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
  void copy(void* dst, const void* src, size_t bytes) override {
    copyOn(dst, src, bytes, [](int) { return cudaStreamPerThread; });
  }

  // On a non-blocking stream of this thread's own (one per device): a user's stream that waits
  // for the op being staged (StreamFence) must not hold the copy back.
  void stageCopy(void* dst, const void* src, size_t bytes) override {
    copyOn(dst, src, bytes, [this](int device) { return ownStream(device); });
  }

  std::shared_ptr<StreamFence> fence(void* userStream) override;
  std::shared_ptr<StreamHold> hold(void* userStream) override;

  const CudaApi& api() const { return api_; }
  // Checks a runtime call, naming it.
  void check(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return;
    api_.getLastError();
    fail(priocclUnhandledCudaError, what, ": ", api_.errorString(e));
  }
  cudaEvent_t takeEvent(int device);
  void giveEvent(int device, cudaEvent_t e);
  WaitWords& words() { return words_; }

 private:
  // Staging runs on prioccl's threads, whose current device is CUDA's default (0): the copy runs
  // on the device that holds the device buffer instead (its copy engine, its context), and the
  // thread gets its own device back.
  template <typename StreamOf>
  void copyOn(void* dst, const void* src, size_t bytes, StreamOf streamOf) {
    if (bytes == 0) return;
    int device = deviceOf(dst);
    if (device < 0) device = deviceOf(src);
    CurrentDevice on(api_.getDevice, api_.setDevice, device);
    check(on.error(), concat("cudaSetDevice(", device, ")"));
    if (device < 0) check(api_.getDevice(&device), "cudaGetDevice");
    cudaStream_t stream = streamOf(device);
    check(api_.memcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream),
          concat("cudaMemcpyAsync of ", bytes, " bytes (device ", device, ")"));
    check(api_.streamSynchronize(stream), "cudaStreamSynchronize");
  }

  // This thread's non-blocking stream on `device` (current on the thread), made on first use and
  // destroyed when the thread ends.
  cudaStream_t ownStream(int device) {
    struct Streams {
      const CudaApi* api = nullptr;
      std::map<int, cudaStream_t> byDevice;
      ~Streams() {
        for (auto& [d, s] : byDevice) api->streamDestroy(s);  // an error at exit is harmless
      }
    };
    thread_local Streams own;
    own.api = &api_;
    auto it = own.byDevice.find(device);
    if (it != own.byDevice.end()) return it->second;
    cudaStream_t s = nullptr;
    check(api_.streamCreate(&s, cudaStreamNonBlocking),
          concat("cudaStreamCreateWithFlags (staging stream, device ", device, ")"));
    own.byDevice.emplace(device, s);
    return s;
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
  std::mutex eventsMutex_;
  std::map<int, std::vector<cudaEvent_t>> spareEvents_;  // by device, kept for reuse
  WaitWords words_{api_};
};

cudaEvent_t CudaMemory::takeEvent(int device) {
  {
    std::lock_guard<std::mutex> lock(eventsMutex_);
    auto& spare = spareEvents_[device];
    if (!spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  check(api_.eventCreate(&e, cudaEventDisableTiming),
        concat("cudaEventCreateWithFlags (device ", device, ")"));
  return e;
}

void CudaMemory::giveEvent(int device, cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(eventsMutex_);
  spareEvents_[device].push_back(e);
}

// An op's place in a user's stream (StreamFence): an event recorded there at submission.
class CudaFence final : public StreamFence {
 public:
  CudaFence(CudaMemory& memory, int device, cudaEvent_t event)
      : memory_(memory), device_(device), event_(event) {}
  ~CudaFence() override { memory_.giveEvent(device_, event_); }

  bool ready() override {
    if (done_) return true;
    cudaError_t e = memory_.api().eventQuery(event_);
    if (e == cudaErrorNotReady) {
      memory_.api().getLastError();
      return false;
    }
    if (e != cudaSuccess) memory_.api().getLastError();  // the op's own calls will say
    done_ = true;
    return true;
  }

 private:
  CudaMemory& memory_;
  const int device_;
  cudaEvent_t event_;
  bool done_ = false;  // asked by one thread at a time (the gate's)
};

// A stream held (StreamHold): a wait there for a word the host stores at release.
class CudaHold final : public StreamHold {
 public:
  CudaHold(WaitWords& words, const WaitWords::Word& word) : words_(words), word_(word) {}
  ~CudaHold() override { release(); }
  void release() noexcept override {
    if (released_.exchange(true)) return;
    __atomic_store_n(word_.host, word_.target, __ATOMIC_RELEASE);
    words_.give(word_);
  }

 private:
  WaitWords& words_;
  const WaitWords::Word word_;
  std::atomic<bool> released_{false};
};

namespace {
// The device a stream lives on (null: the legacy default stream, the calling thread's device).
int deviceOfStream(CudaMemory& m, cudaStream_t stream) {
  int device = -1;
  const CudaApi& api = m.api();
  if (api.streamGetDevice && api.streamGetDevice(stream, &device) == cudaSuccess) return device;
  if (api.streamGetDevice) api.getLastError();
  m.check(api.getDevice(&device), "cudaGetDevice");
  return device;
}
}  // namespace

std::shared_ptr<StreamFence> CudaMemory::fence(void* userStream) {
  auto stream = static_cast<cudaStream_t>(userStream);
  const int device = deviceOfStream(*this, stream);
  // The event is recorded where the stream lives (the thread may be on another device).
  CurrentDevice on(api_.getDevice, api_.setDevice, device);
  check(on.error(), concat("cudaSetDevice(", device, ")"));
  // A stream with nothing left to run needs no fence: the op goes in at once.
  cudaError_t idle = api_.streamQuery(stream);
  if (idle == cudaSuccess) return nullptr;
  if (idle != cudaErrorNotReady) check(idle, concat("cudaStreamQuery (device ", device, ")"));
  api_.getLastError();  // cudaErrorNotReady is no error, but clear it all the same
  cudaEvent_t event = takeEvent(device);
  cudaError_t e = api_.eventRecord(event, stream);
  if (e != cudaSuccess) {
    giveEvent(device, event);
    check(e, concat("cudaEventRecord on the op's stream (device ", device, ")"));
  }
  return std::make_shared<CudaFence>(*this, device, event);
}

std::shared_ptr<StreamHold> CudaMemory::hold(void* userStream) {
  if (!api_.waitValue32)
    fail(priocclUnhandledCudaError,
         "holding a stream for an op needs the CUDA driver's cuStreamWaitValue32, which this "
         "driver lacks: wait for the op's request instead");
  auto stream = static_cast<cudaStream_t>(userStream);
  CurrentDevice on(api_.getDevice, api_.setDevice, deviceOfStream(*this, stream));
  check(on.error(), "cudaSetDevice (the held stream's device)");
  WaitWords::Word w = words_.take();
  auto held = std::make_shared<CudaHold>(words_, w);  // releases the word on every way out
  CUresult r = api_.waitValue32(stream, w.device, w.target, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS)
    fail(priocclUnhandledCudaError,
         "cuStreamWaitValue32 (holding the stream for the op) failed: ", "CUresult ",
         static_cast<int>(r));
  return held;
}

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
    detail::bindSymbol(rt, "cudaStreamCreateWithFlags", &a.streamCreate, &m);
    detail::bindSymbol(rt, "cudaStreamDestroy", &a.streamDestroy, &m);
    detail::bindSymbol(rt, "cudaEventCreateWithFlags", &a.eventCreate, &m);
    detail::bindSymbol(rt, "cudaEventRecord", &a.eventRecord, &m);
    detail::bindSymbol(rt, "cudaEventQuery", &a.eventQuery, &m);
    detail::bindSymbol(rt, "cudaStreamQuery", &a.streamQuery, &m);
    detail::bindSymbol(rt, "cudaHostGetDevicePointer", &a.hostDevicePointer, &m);
    a.streamGetDevice =
        reinterpret_cast<decltype(a.streamGetDevice)>(dlsym(rt, "cudaStreamGetDevice"));
    // The driver is loaded already (device_memory.cpp looks for it before asking for this).
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (!driver) driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver) {
      for (const char* name : {"cuStreamWaitValue32_v2", "cuStreamWaitValue32"})
        if (!a.waitValue32)
          a.waitValue32 = reinterpret_cast<decltype(a.waitValue32)>(dlsym(driver, name));
    }
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
