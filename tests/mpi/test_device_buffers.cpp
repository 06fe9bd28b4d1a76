// Device buffers over the host transports (src/api/device_stager.h). Without a GPU: a fake
// device memory whose "device" addresses lie in a PROT_NONE reservation, so any host access to
// them by the library crashes the test, and whose copies go to a backing store. With
// PRIOCCL_TEST_DEVICE=cuda (gpu.device_buffers.*): real CUDA memory, each rank on device
// rank % devices, found by the library itself; without a usable GPU the suite skips saying why.
// Every op kind, on device buffers, must give the bits the same op gives on host buffers, and a
// failed op must leave the device buffer as it was.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifdef PRIOCCL_TEST_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "device/device_memory.h"
#include "mpi_test_util.h"
#include "prioccl/modes.hpp"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::Communicator;
using prioccl::Request;
using prioccl::test::bytesOf;
using prioccl::test::kDtypes;
using prioccl::test::kOps;
using prioccl::test::kSanitizerShrink;
using prioccl::test::sizeOf;
using prioccl::test::worldRank;
using prioccl::test::worldSize;

// The test's side of device memory: its own allocations and copies.
class TestDevice {
 public:
  virtual ~TestDevice() = default;
  virtual unsigned char* alloc(size_t bytes) = 0;
  virtual void freeAll() = 0;
  virtual unsigned char* upload(const std::vector<unsigned char>& bytes) = 0;
  virtual std::vector<unsigned char> download(const void* p, size_t bytes) = 0;
  // The library's copies so far, or -1 where they cannot be counted (a real device).
  virtual int64_t libraryCopies() const { return -1; }
  // Streams (priocclSetStream): a stream of the test's own, and work queued on it: a write of
  // `bytes` to p that lands only ~100 ms later (the kernel computing an op's input), and a read of
  // p's bytes (the kernel using an op's result) that `sync` hands back once the stream got there.
  virtual void* newStream() = 0;
  virtual void writeLater(void* stream, unsigned char* p,
                          const std::vector<unsigned char>& bytes) = 0;
  virtual void readLater(void* stream, const unsigned char* p, size_t bytes) = 0;
  // Waits for everything queued on the stream; returns what its reads read, in order.
  virtual std::vector<std::vector<unsigned char>> sync(void* stream) = 0;
};

// The fake device's stream: a thread that runs the work queued on it in order, as a CUDA stream
// runs its kernels; the library's fences and holds (device_memory.h) are work on it too.
class FakeStream {
 public:
  FakeStream() : thread_([this] { run(); }) {}
  ~FakeStream() {
    enqueue(nullptr);
    thread_.join();
  }
  void enqueue(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(mutex_);
    work_.push_back(std::move(f));
    cv_.notify_all();
  }
  bool idle() {
    std::lock_guard<std::mutex> lock(mutex_);
    return work_.empty() && !running_;
  }
  void sync() {
    auto done = std::make_shared<std::atomic<bool>>(false);
    enqueue([done] { *done = true; });
    while (!*done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<std::vector<unsigned char>> reads;  // readLater's, taken by the test after sync

 private:
  void run() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !work_.empty(); });
        f = std::move(work_.front());
        work_.pop_front();
        running_ = true;
      }
      if (!f) return;
      f();
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = false;
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> work_;
  bool running_ = false;
  std::thread thread_;
};

// A flag work on a fake stream sets, and others wait for.
struct FakeSignal {
  std::mutex mutex;
  std::condition_variable cv;
  bool set = false;
  void raise() {
    std::lock_guard<std::mutex> lock(mutex);
    set = true;
    cv.notify_all();
  }
  bool isSet() {
    std::lock_guard<std::mutex> lock(mutex);
    return set;
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return set; });
  }
};

class FakeFence final : public prioccl::device::StreamFence {
 public:
  explicit FakeFence(FakeStream& s) : signal_(std::make_shared<FakeSignal>()) {
    s.enqueue([signal = signal_] { signal->raise(); });
  }
  bool ready() override { return signal_->isSet(); }

 private:
  std::shared_ptr<FakeSignal> signal_;
};

class FakeHold final : public prioccl::device::StreamHold {
 public:
  FakeHold(FakeStream& s, std::atomic<int>& releases)
      : signal_(std::make_shared<FakeSignal>()), releases_(releases) {
    s.enqueue([signal = signal_] { signal->wait(); });
  }
  ~FakeHold() override { release(); }
  void release() noexcept override {
    if (signal_->isSet()) return;
    ++releases_;
    signal_->raise();
  }

 private:
  std::shared_ptr<FakeSignal> signal_;
  std::atomic<int>& releases_;
};

class FakeDevice final : public prioccl::device::DeviceMemory, public TestDevice {
 public:
  static constexpr size_t kBytes = size_t{1} << 30;
  FakeDevice() {
    base_ = static_cast<unsigned char*>(
        mmap(nullptr, kBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    store_ = static_cast<unsigned char*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (base_ == MAP_FAILED || store_ == MAP_FAILED) std::abort();
  }
  ~FakeDevice() override {
    munmap(base_, kBytes);
    munmap(store_, kBytes);
  }
  const char* name() const override { return "fake"; }
  bool isDevice(const void* p) override {
    auto* b = static_cast<const unsigned char*>(p);
    return b >= base_ && b < base_ + kBytes;
  }
  void* allocHost(size_t bytes) override {
    ++hostAllocs;
    return ::operator new(bytes);
  }
  void freeHost(void* p) noexcept override { ::operator delete(p); }
  // The library's device allocations come from the test's bump allocator (freed with it).
  void* allocDevice(size_t bytes) override { return alloc(bytes); }
  void freeDevice(void*) noexcept override {}
  void copy(void* dst, const void* src, size_t bytes) override {
    ++copies;
    if (isDevice(src) && !isDevice(dst)) ++copiesIn;
    if (delayUs > 0) std::this_thread::sleep_for(std::chrono::microseconds(delayUs.load()));
    std::memmove(host(dst), host(src), bytes);
  }
  void stageCopy(void* dst, const void* src, size_t bytes) override { copy(dst, src, bytes); }
  std::shared_ptr<prioccl::device::StreamFence> fence(void* stream) override {
    FakeStream& s = streamOf(stream);
    if (s.idle()) return nullptr;  // as CUDA's: nothing to wait for
    ++fencesMade;
    return std::make_shared<FakeFence>(s);
  }
  std::shared_ptr<prioccl::device::StreamHold> hold(void* stream) override {
    ++holdsMade;
    return std::make_shared<FakeHold>(streamOf(stream), holdsReleased);
  }

  void* newStream() override {
    std::lock_guard<std::mutex> lock(streamsMutex_);
    streams_.push_back(std::make_unique<FakeStream>());
    return streams_.back().get();
  }
  void writeLater(void* stream, unsigned char* p,
                  const std::vector<unsigned char>& bytes) override {
    streamOf(stream).enqueue([this, p, bytes] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::memcpy(host(p), bytes.data(), bytes.size());
    });
  }
  void readLater(void* stream, const unsigned char* p, size_t bytes) override {
    FakeStream& s = streamOf(stream);
    s.enqueue([this, &s, p, bytes] { s.reads.push_back(download(p, bytes)); });
  }
  std::vector<std::vector<unsigned char>> sync(void* stream) override {
    FakeStream& s = streamOf(stream);
    s.sync();
    return std::move(s.reads);
  }

  int64_t libraryCopies() const override { return static_cast<int64_t>(copies.load()); }
  // The test's own allocations: 256-byte aligned, freed all at once.
  unsigned char* alloc(size_t bytes) override {
    unsigned char* p = base_ + next_;
    next_ += (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    if (next_ > kBytes) std::abort();
    return p;
  }
  void freeAll() override { next_ = 0; }
  unsigned char* upload(const std::vector<unsigned char>& bytes) override {
    unsigned char* p = alloc(bytes.size());
    std::memcpy(host(p), bytes.data(), bytes.size());
    return p;
  }
  std::vector<unsigned char> download(const void* p, size_t bytes) override {
    auto* h = static_cast<const unsigned char*>(host(const_cast<void*>(p)));
    return std::vector<unsigned char>(h, h + bytes);
  }

  std::atomic<uint64_t> copies{0}, copiesIn{0}, hostAllocs{0};
  std::atomic<int> delayUs{0};  // each copy takes this much longer (a slow link to the device)
  std::atomic<int> holdsMade{0}, holdsReleased{0}, fencesMade{0};

 private:
  // Null: the legacy default stream (one per fake device).
  FakeStream& streamOf(void* stream) {
    if (stream) return *static_cast<FakeStream*>(stream);
    std::lock_guard<std::mutex> lock(streamsMutex_);
    if (!legacy_) legacy_ = std::make_unique<FakeStream>();
    return *legacy_;
  }
  std::mutex streamsMutex_;
  std::unique_ptr<FakeStream> legacy_;
  std::vector<std::unique_ptr<FakeStream>> streams_;

  void* host(void* p) {
    return isDevice(p) ? store_ + (static_cast<unsigned char*>(p) - base_) : p;
  }
  const void* host(const void* p) { return host(const_cast<void*>(p)); }
  unsigned char* base_ = nullptr;
  unsigned char* store_ = nullptr;
  size_t next_ = 0;
};

#ifdef PRIOCCL_TEST_HAVE_CUDA
class CudaDevice final : public TestDevice {
 public:
  ~CudaDevice() override { freeAll(); }
  unsigned char* alloc(size_t bytes) override {
    void* p = nullptr;
    if (cudaMalloc(&p, std::max<size_t>(bytes, 1)) != cudaSuccess) std::abort();
    blocks_.push_back(p);
    return static_cast<unsigned char*>(p);
  }
  void freeAll() override {
    for (void* p : blocks_) cudaFree(p);
    blocks_.clear();
  }
  // Landed when it returns: cudaMemcpy from pageable memory may return before its DMA does
  // (only work on the legacy default stream is ordered after it), and the stream tests submit
  // ops on streams of their own (GPU run 13: a rank's op read the buffer before the upload).
  unsigned char* upload(const std::vector<unsigned char>& bytes) override {
    unsigned char* p = alloc(bytes.size());
    if (cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
      std::abort();
    return p;
  }
  std::vector<unsigned char> download(const void* p, size_t bytes) override {
    std::vector<unsigned char> h(bytes);
    if (cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) std::abort();
    return h;
  }

  void* newStream() override {
    cudaStream_t s = nullptr;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) std::abort();
    return s;  // kept: a test makes a few
  }
  // A host function that sleeps holds the stream back, as a long kernel would; the copy after it
  // is the "kernel" writing the op's input.
  void writeLater(void* stream, unsigned char* p,
                  const std::vector<unsigned char>& bytes) override {
    auto s = static_cast<cudaStream_t>(stream);
    unsigned char* staged = pinned(bytes.size());
    std::memcpy(staged, bytes.data(), bytes.size());
    if (cudaLaunchHostFunc(
            s, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); },
            nullptr) != cudaSuccess ||
        cudaMemcpyAsync(p, staged, bytes.size(), cudaMemcpyHostToDevice, s) != cudaSuccess)
      std::abort();
  }
  void readLater(void* stream, const unsigned char* p, size_t bytes) override {
    unsigned char* out = pinned(bytes);
    reads_[stream].push_back({out, bytes});
    if (cudaMemcpyAsync(out, p, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)) !=
        cudaSuccess)
      std::abort();
  }
  std::vector<std::vector<unsigned char>> sync(void* stream) override {
    if (cudaStreamSynchronize(static_cast<cudaStream_t>(stream)) != cudaSuccess) std::abort();
    std::vector<std::vector<unsigned char>> got;
    for (auto& [p, n] : reads_[stream]) got.emplace_back(p, p + n);
    reads_.erase(stream);
    return got;
  }

 private:
  unsigned char* pinned(size_t bytes) {
    void* p = nullptr;
    if (cudaMallocHost(&p, std::max<size_t>(bytes, 1)) != cudaSuccess) std::abort();
    return static_cast<unsigned char*>(p);  // kept to the end: a stream may still use it
  }
  std::vector<void*> blocks_;
  std::map<void*, std::vector<std::pair<unsigned char*, size_t>>> reads_;
};

// Why this rank cannot use a GPU ("" when it can, its device then chosen).
std::string chooseGpu() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
  if (n == 0) return "no CUDA device";
  e = cudaSetDevice(worldRank() % n);
  if (e != cudaSuccess) return std::string("cudaSetDevice: ") + cudaGetErrorString(e);
  return "";
}
#endif

TestDevice* g_device = nullptr;
FakeDevice* g_fake = nullptr;
std::string g_noGpu;  // why the real-device run skips

class DeviceBuffers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* which = std::getenv("PRIOCCL_TEST_DEVICE");
    if (which && std::string(which) == "cuda") {
#ifdef PRIOCCL_TEST_HAVE_CUDA
      g_noGpu = chooseGpu();
      // Every rank decides alike: one rank skipping while the others create a communicator
      // would leave them waiting for it.
      int bad = g_noGpu.empty() ? 0 : 1, anyBad = 0;
      MPI_Allreduce(&bad, &anyBad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
      if (anyBad && g_noGpu.empty()) g_noGpu = "another rank has no usable GPU";
      if (!anyBad) g_device = new CudaDevice;
#else
      g_noGpu = "built without the CUDA toolkit";
#endif
    } else {
      g_device = g_fake = new FakeDevice;
      prioccl::device::setForTesting(g_fake);
    }
    if (g_device) comm_ = new Communicator(Communicator::world());
  }
  static void TearDownTestSuite() {
    delete comm_;
    comm_ = nullptr;
    prioccl::device::setForTesting(nullptr);
    delete g_device;
    g_device = g_fake = nullptr;
  }
  void SetUp() override {
    if (!g_device) GTEST_SKIP() << "no usable GPU: " << g_noGpu;
  }
  void TearDown() override {
    if (g_device) g_device->freeAll();
  }

  // Runs `op` on device copies of `send` and `recv` (a recv prefilled with `recv`'s bytes, so
  // what an op leaves alone is compared too), then on host copies, and compares the receive
  // buffers bitwise. `inPlace`: op gets the receive buffer's address as its send buffer base too
  // (it offsets it itself).
  using Op = std::function<Request(const void* send, void* recv)>;
  void same(const std::string& what, const std::vector<unsigned char>& send,
            const std::vector<unsigned char>& recv, const Op& op, bool inPlace = false) {
    SCOPED_TRACE(what);
    const int64_t copiesBefore = g_device->libraryCopies();
    unsigned char* dRecv = g_device->upload(recv);
    unsigned char* dSend = inPlace ? dRecv : g_device->upload(send);
    op(dSend, dRecv).wait();
    std::vector<unsigned char> hostRecv = recv, hostSend = send;
    op(inPlace ? hostRecv.data() : hostSend.data(), hostRecv.data()).wait();
    std::vector<unsigned char> got = g_device->download(dRecv, recv.size());
    if (copiesBefore >= 0) {
      EXPECT_GT(g_device->libraryCopies(), copiesBefore) << "the op did not go through staging";
    }
    ASSERT_EQ(got.size(), hostRecv.size());
    auto diff = std::mismatch(got.begin(), got.end(), hostRecv.begin());
    EXPECT_TRUE(diff.first == got.end())
        << "first difference at byte " << (diff.first - got.begin()) << " of " << got.size();
  }

  static Communicator* comm_;
};

Communicator* DeviceBuffers::comm_ = nullptr;

TEST_F(DeviceBuffers, AllReduceEveryDtypeAndOp) {
  const int r = worldRank();
  // One element, an odd count, and several chunks of the default chunk size.
  for (size_t count : {size_t{1}, size_t{1001}, size_t{600000} / kSanitizerShrink}) {
    for (auto dt : kDtypes) {
      for (auto op : kOps) {
        const size_t bytes = count * sizeOf(dt);
        std::string what = "count " + std::to_string(count) + " dtype " + std::to_string(dt) +
                           " op " + std::to_string(op);
        auto send = bytesOf(r * 7919 + count + dt * 31 + op, bytes);
        auto run = [&](const void* s, void* d) {
          return comm_->allReduceAsync(s, d, count, dt, op, 0);
        };
        same(what, send, std::vector<unsigned char>(bytes, 0xA5), run);
        same(what + " in place", send, send, run, true);
        if (count > 1) break;  // every op at one size is enough for the large ones
      }
    }
  }
}

TEST_F(DeviceBuffers, RootedKinds) {
  const int r = worldRank(), p = worldSize();
  const size_t count = 40000;
  for (int root = 0; root < p; ++root) {
    auto send = bytesOf(r * 13 + root, count * 4);
    same("broadcast root " + std::to_string(root), send, std::vector<unsigned char>(count * 4, 1),
         [&](const void* s, void* d) {
           return comm_->broadcastAsync(s, d, count, priocclFloat32, root);
         });
    same("reduce root " + std::to_string(root), send, std::vector<unsigned char>(count * 4, 2),
         [&](const void* s, void* d) {
           return comm_->reduceAsync(s, d, count, priocclInt32, priocclSum, root);
         });
  }
}

TEST_F(DeviceBuffers, BlockedKinds) {
  const int r = worldRank(), p = worldSize();
  const size_t count = 3001;  // per rank
  const size_t block = count * 2;
  auto mine = bytesOf(100 + r, block);
  auto all = bytesOf(200 + r, block * p);
  same("allgather", mine, std::vector<unsigned char>(block * p, 3),
       [&](const void* s, void* d) { return comm_->allGatherAsync(s, d, count, priocclFloat16); });
  // In place: this rank's block of the receive buffer is the send buffer.
  same(
      "allgather in place", mine, all,
      [&](const void*, void* d) {
        return comm_->allGatherAsync(static_cast<unsigned char*>(d) + r * block, d, count,
                                     priocclFloat16);
      },
      true);
  same("reducescatter", all, std::vector<unsigned char>(block, 4), [&](const void* s, void* d) {
    return comm_->reduceScatterAsync(s, d, count, priocclBfloat16, priocclSum);
  });
  same(
      "reducescatter in place", all, all,
      [&](const void* s, void*) {
        auto* base = static_cast<unsigned char*>(const_cast<void*>(s));
        return comm_->reduceScatterAsync(base, base + r * block, count, priocclBfloat16,
                                         priocclMax);
      },
      true);
  same("alltoall", all, std::vector<unsigned char>(block * p, 5),
       [&](const void* s, void* d) { return comm_->allToAllAsync(s, d, count, priocclFloat16); });
}

TEST_F(DeviceBuffers, VKindsKeepTheGaps) {
  const int r = worldRank(), p = worldSize();
  const size_t P = static_cast<size_t>(p);
  // Rank b's block: 100 + 37 b elements of int32, with a gap of 5 elements before each block.
  std::vector<size_t> counts(P), displs(P), packed(P);
  size_t at = 0, total = 0;
  for (size_t b = 0; b < P; ++b) {
    counts[b] = 100 + 37 * b;
    displs[b] = at + 5;
    at = displs[b] + counts[b];
    packed[b] = total;
    total += counts[b];
  }
  const size_t me = static_cast<size_t>(r);
  same("allgatherv", bytesOf(300 + r, counts[me] * 4), bytesOf(400, at * 4),
       [&](const void* s, void* d) {
         return comm_->allGatherVAsync(s, d, counts.data(), displs.data(), priocclInt32);
       });
  same("reducescatterv", bytesOf(500 + r, total * 4), std::vector<unsigned char>(counts[me] * 4, 6),
       [&](const void* s, void* d) {
         return comm_->reduceScatterVAsync(s, d, counts.data(), priocclInt32, priocclSum);
       });
  // All-to-all-v: rank r sends rank j (r + j) % 3 + 1 elements; the receive side is the mirror,
  // with gaps.
  std::vector<size_t> sc(P), sd(P), rc(P), rd(P);
  size_t sAt = 0, rAt = 0;
  for (size_t j = 0; j < P; ++j) {
    sc[j] = (me + j) % 3 + 1;
    sd[j] = sAt;
    sAt += sc[j];
    rc[j] = (j + me) % 3 + 1;
    rd[j] = rAt + 2;
    rAt = rd[j] + rc[j];
  }
  same("alltoallv", bytesOf(600 + r, sAt * 8), bytesOf(700, rAt * 8), [&](const void* s, void* d) {
    return comm_->allToAllVAsync(s, sc.data(), sd.data(), d, rc.data(), rd.data(), priocclFloat64);
  });
}

TEST_F(DeviceBuffers, PointToPointRing) {
  const int r = worldRank(), p = worldSize();
  if (p < 2) GTEST_SKIP() << "needs 2 ranks (a send and a receive between two of them)";
  const size_t count = 70000;  // several chunks
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  auto mine = bytesOf(800 + r, count * 4);
  same("send/recv", mine, std::vector<unsigned char>(count * 4, 7), [&](const void* s, void* d) {
    Request in = comm_->recvAsync(d, count, priocclFloat32, prev);
    comm_->sendAsync(s, count, priocclFloat32, next).wait();
    return in;
  });
}

TEST_F(DeviceBuffers, HostAndDeviceMixed) {
  const int r = worldRank();
  const size_t count = 5000;
  auto send = bytesOf(900 + r, count * 8);
  // Host send buffer, device receive buffer, and the other way round.
  unsigned char* dRecv = g_device->alloc(count * 8);
  comm_->allReduceAsync(send.data(), dRecv, count, priocclInt64, priocclSum, 0).wait();
  std::vector<unsigned char> hostRecv(count * 8);
  comm_->allReduceAsync(send.data(), hostRecv.data(), count, priocclInt64, priocclSum, 0).wait();
  EXPECT_EQ(g_device->download(dRecv, count * 8), hostRecv);
  unsigned char* dSend = g_device->upload(send);
  std::vector<unsigned char> got(count * 8);
  comm_->allReduceAsync(dSend, got.data(), count, priocclInt64, priocclSum, 0).wait();
  EXPECT_EQ(got, hostRecv);
}

// The result is on the device when the request completes: its callback and test() see it.
TEST_F(DeviceBuffers, CompletionMeansTheDataIsBack) {
  const int r = worldRank();
  const size_t count = 300000 / kSanitizerShrink;
  auto send = bytesOf(1000 + r, count * 4);
  std::vector<unsigned char> expect(count * 4);
  comm_->allReduceAsync(send.data(), expect.data(), count, priocclUint32, priocclSum, 0).wait();
  unsigned char* d = g_device->upload(send);
  std::atomic<bool> seen{false}, right{false};
  Request req = comm_->allReduceAsync(d, d, count, priocclUint32, priocclSum, 0);
  req.onComplete([&](priocclResult_t code, const std::string&) {
    right = code == priocclSuccess && g_device->download(d, count * 4) == expect;
    seen = true;
  });
  while (!req.test()) std::this_thread::yield();
  EXPECT_EQ(g_device->download(d, count * 4), expect);
  req.wait();
  while (!seen) std::this_thread::yield();
  EXPECT_TRUE(right.load());
}

// Ops in a group, and a more urgent op submitted after a bulk one.
TEST_F(DeviceBuffers, GroupAndPriorities) {
  const int r = worldRank();
  const size_t big = 400000 / kSanitizerShrink, small = 100;
  auto a = bytesOf(1100 + r, big * 4), b = bytesOf(1200 + r, small * 4);
  std::vector<unsigned char> ea(big * 4), eb(small * 4);
  comm_->allReduceAsync(a.data(), ea.data(), big, priocclFloat32, priocclSum, 5).wait();
  comm_->allReduceAsync(b.data(), eb.data(), small, priocclFloat32, priocclSum, 0).wait();
  unsigned char *da = g_device->upload(a), *db = g_device->upload(b);
  prioccl::groupStart();
  Request ra = comm_->allReduceAsync(da, da, big, priocclFloat32, priocclSum, 5);
  Request rb = comm_->allReduceAsync(db, db, small, priocclFloat32, priocclSum, 0);
  prioccl::groupEnd();
  rb.wait();
  ra.wait();
  EXPECT_EQ(g_device->download(da, big * 4), ea);
  EXPECT_EQ(g_device->download(db, small * 4), eb);
}

// A failed op copies nothing back: a shape mismatch fails it on every rank before data moves,
// and the device buffer holds what it held.
TEST_F(DeviceBuffers, FailedOpLeavesTheDeviceBuffer) {
  const int r = worldRank();
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks (a mismatch between two of them)";
  auto before = bytesOf(1300 + r, 6 * 4);
  unsigned char* d = g_device->upload(before);
  prioccl::shapeNext(r == 0 ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{3, 2});
  Request req = comm_->allReduceAsync(d, d, 6, priocclFloat32, priocclSum, 0);
  EXPECT_THROW(req.wait(), prioccl::Error);
  EXPECT_EQ(g_device->download(d, 6 * 4), before);
  // The communicator still works.
  std::vector<unsigned char> one = bytesOf(1400 + r, 16);
  unsigned char* d2 = g_device->upload(one);
  comm_->allReduceAsync(d2, d2, 4, priocclInt32, priocclMax, 0).wait();
}

// A failed op's pinned blocks are never handed to a later op: after a failure, a cancelled
// receive may still be writing into them (issue 45, item 5). A successful op's are reused.
TEST_F(DeviceBuffers, FailedOpsBlocksAreNotReused) {
  if (!g_fake) GTEST_SKIP() << "counts the fake device's pinned allocations";
  const int r = worldRank();
  if (worldSize() < 2) GTEST_SKIP() << "needs 2 ranks (a mismatch between two of them)";
  const size_t count = (24u << 20) / 4;  // one 24 MiB block (in place): larger than any before
  unsigned char* d = g_device->upload(bytesOf(1700 + r, count * 4));
  auto run = [&] { comm_->allReduceAsync(d, d, count, priocclFloat32, priocclMax, 0).wait(); };
  run();
  const uint64_t warm = g_fake->hostAllocs.load();
  run();
  ASSERT_EQ(g_fake->hostAllocs.load(), warm) << "a successful op's block was not reused";
  prioccl::shapeNext(r == 0 ? std::vector<int64_t>{200, 200} : std::vector<int64_t>{400, 100});
  EXPECT_THROW(run(), prioccl::Error);  // takes the pooled block, and fails
  run();
  EXPECT_GT(g_fake->hostAllocs.load(), warm) << "the failed op's block was handed out again";
}

// A large op is copied in and back chunk by chunk while it runs: slow copies (3 ms each) make the
// engine reach every chunk before its input is in, so a chunk started early would read stale
// bytes; the result must still be the host's. An urgent small op submitted meanwhile completes
// first.
TEST_F(DeviceBuffers, LargeOpsMoveChunkByChunk) {
  if (!g_fake) GTEST_SKIP() << "counts the fake device's copies";
  const int r = worldRank();
  const size_t count = (8u << 20) / 4 / kSanitizerShrink;  // 8 MiB of float32: several chunks
  auto data = bytesOf(1500 + r, count * 4);
  std::vector<unsigned char> expect(count * 4);
  comm_->allReduceAsync(data.data(), expect.data(), count, priocclFloat32, priocclSum, 5).wait();
  auto small = bytesOf(1600 + r, 64);
  std::vector<unsigned char> smallExpect(64);
  comm_->allReduceAsync(small.data(), smallExpect.data(), 16, priocclInt32, priocclSum, 0).wait();

  unsigned char* d = g_device->upload(data);
  unsigned char* ds = g_device->upload(small);
  const uint64_t copiesBefore = g_fake->copies.load(), inBefore = g_fake->copiesIn.load();
  g_fake->delayUs = 3000;
  Request big = comm_->allReduceAsync(d, d, count, priocclFloat32, priocclSum, 5);
  Request urgent = comm_->allReduceAsync(ds, ds, 16, priocclInt32, priocclSum, 0);
  urgent.wait();
  const bool bigStillRunning = !big.test();
  big.wait();
  g_fake->delayUs = 0;
  EXPECT_EQ(g_device->download(d, count * 4), expect);
  EXPECT_EQ(g_device->download(ds, 64), smallExpect);
  EXPECT_TRUE(bigStillRunning) << "the urgent op waited for the whole large one";
  const uint64_t in = g_fake->copiesIn.load() - inBefore;
  const uint64_t out = g_fake->copies.load() - copiesBefore - in;
  // The small op: one copy each way; the large one: a piece per chunk each way.
  EXPECT_GE(in, 3u) << "the large op's input was not copied in pieces";
  EXPECT_GE(out, 3u) << "the large op's result was not copied back chunk by chunk";
}

// Lagged mode takes device gradients and writes device results (its staging copies them in and
// out), through warm-up, the switch step and the lagged steps: step t returns step t-1's sum.
TEST_F(DeviceBuffers, LaggedModeOnDeviceBuffers) {
  const int n = worldSize(), r = worldRank();
  const size_t count = 1000;
  prioccl::LaggedAllReduce::Options o;
  o.warmupSteps = 1;
  o.key = "test.lagged.device";
  prioccl::LaggedAllReduce lagged(*comm_, count, priocclInt32, priocclSum, o);
  auto grads = [&](int step) {
    std::vector<int32_t> g(count);
    for (size_t i = 0; i < count; ++i) g[i] = static_cast<int32_t>(i) * (r + 1) + step;
    return g;
  };
  auto sum = [&](int step) {  // over ranks of i * (rank + 1) + step
    std::vector<int32_t> e(count);
    for (size_t i = 0; i < count; ++i)
      e[i] = static_cast<int32_t>(i) * (n * (n + 1) / 2) + n * step;
    return e;
  };
  auto bytes = [](const std::vector<int32_t>& v) {
    const auto* b = reinterpret_cast<const unsigned char*>(v.data());
    return std::vector<unsigned char>(b, b + v.size() * sizeof(int32_t));
  };
  unsigned char* out = g_device->alloc(count * 4);
  for (int step = 0; step < 4; ++step) {
    unsigned char* g = g_device->upload(bytes(grads(step)));
    const bool has = lagged.step(g, out);
    // Warm-up (step 0) returns its own sum; step 1 switches (none); later steps the previous one.
    EXPECT_EQ(has, step != 1) << "step " << step;
    if (step == 0) {
      EXPECT_EQ(g_device->download(out, count * 4), bytes(sum(0)));
    } else if (step >= 2) {
      EXPECT_EQ(g_device->download(out, count * 4), bytes(sum(step - 1))) << "step " << step;
    }
  }
  EXPECT_TRUE(lagged.flush(out));
  EXPECT_EQ(g_device->download(out, count * 4), bytes(sum(3)));
}

// Stream order (docs/usage.md, "Streams"), the input side: an op starts only after the work queued
// on the thread's stream before it. The "kernel" writing the input lands 100 ms after the op is
// submitted; an op that copied its input at once would reduce the stale bytes. Small ops (copied
// on the caller's thread otherwise) and large ones (by the staging worker).
TEST_F(DeviceBuffers, OpStartsAfterTheStreamsEarlierWork) {
  const int r = worldRank();
  void* stream = g_device->newStream();
  for (size_t count : {size_t{100}, size_t{600000} / kSanitizerShrink}) {
    SCOPED_TRACE("count " + std::to_string(count));
    auto real = bytesOf(1800 + r, count * 4), stale = bytesOf(1900 + r, count * 4);
    std::vector<unsigned char> expect(count * 4);
    comm_->allReduceAsync(real.data(), expect.data(), count, priocclInt32, priocclSum, 0).wait();
    unsigned char* dSend = g_device->upload(stale);
    unsigned char* dRecv = g_device->alloc(count * 4);
    g_device->writeLater(stream, dSend, real);
    prioccl::setStream(stream);
    Request req = comm_->allReduceAsync(dSend, dRecv, count, priocclInt32, priocclSum, 0);
    prioccl::setStream(nullptr);
    req.wait();
    EXPECT_EQ(g_device->download(dRecv, count * 4), expect);
    g_device->sync(stream);
  }
}

// The output side: with PRIOCCL_STREAM_HOLD (and with streamWait on a request), work queued on
// the stream after the op waits for it, so a "kernel" reading the result right after the
// submission reads the final bytes; a failed op releases the stream as well.
TEST_F(DeviceBuffers, HeldStreamWaitsForTheResult) {
  const int r = worldRank();
  const size_t count = 300000 / kSanitizerShrink;
  auto send = bytesOf(2000 + r, count * 4);
  std::vector<unsigned char> expect(count * 4);
  comm_->allReduceAsync(send.data(), expect.data(), count, priocclUint32, priocclSum, 0).wait();
  void* stream = g_device->newStream();
  const int madeBefore = g_fake ? g_fake->holdsMade.load() : 0;
  const int releasedBefore = g_fake ? g_fake->holdsReleased.load() : 0;

  unsigned char* dSend = g_device->upload(send);
  unsigned char* dRecv = g_device->upload(std::vector<unsigned char>(count * 4, 0));
  prioccl::setStream(stream, true);
  Request held = comm_->allReduceAsync(dSend, dRecv, count, priocclUint32, priocclSum, 0);
  prioccl::setStream(nullptr);
  g_device->readLater(stream, dRecv, count * 4);
  std::vector<std::vector<unsigned char>> reads = g_device->sync(stream);  // never before the op
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0], expect) << "work queued after the op ran before its result was back";
  held.wait();

  unsigned char* dRecv2 = g_device->upload(std::vector<unsigned char>(count * 4, 0));
  Request later = comm_->allReduceAsync(dSend, dRecv2, count, priocclUint32, priocclSum, 0);
  later.streamWait(stream);
  g_device->readLater(stream, dRecv2, count * 4);
  reads = g_device->sync(stream);
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0], expect) << "streamWait: the stream ran ahead of the op";
  later.wait();

  if (worldSize() >= 2) {  // a shape mismatch fails the op on every rank: the stream goes on
    prioccl::setStream(stream, true);
    prioccl::shapeNext(r == 0 ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{3, 2});
    Request failed = comm_->allReduceAsync(dSend, dRecv, 6, priocclFloat32, priocclSum, 0);
    prioccl::setStream(nullptr);
    EXPECT_THROW(failed.wait(), prioccl::Error);
    g_device->sync(stream);  // would hang if the failed op kept the stream
  }
  if (g_fake) {  // streamWait holds nothing where the op has ended already
    const int made = g_fake->holdsMade.load() - madeBefore;
    EXPECT_GE(made, worldSize() >= 2 ? 2 : 1);
    EXPECT_EQ(g_fake->holdsReleased.load() - releasedBefore, made);
  }
}

// Ops reach the engine in submission order though one waits for its stream: on rank 0 an op
// whose stream is busy for 100 ms, then an unnamed op on host buffers submitted at once (the other
// ranks' streams are idle). Unnamed ops match by order: were the host op handed over first on
// rank 0, it would meet the other ranks' device op (a mismatch of counts, or wrong sums).
TEST_F(DeviceBuffers, OpsBehindABusyStreamKeepTheirOrder) {
  const int r = worldRank();
  const size_t count = 1000, other = 37;
  void* stream = g_device->newStream();
  auto real = bytesOf(2100 + r, count * 4);
  auto host = bytesOf(2200 + r, other * 8);
  std::vector<unsigned char> expect(count * 4), expectHost(other * 8), gotHost(other * 8);
  comm_->allReduceAsync(real.data(), expect.data(), count, priocclInt32, priocclSum, 0).wait();
  comm_->allReduceAsync(host.data(), expectHost.data(), other, priocclInt64, priocclMax, 0).wait();
  unsigned char* d = g_device->upload(r == 0 ? std::vector<unsigned char>(count * 4, 0) : real);
  if (r == 0) g_device->writeLater(stream, d, real);
  prioccl::setStream(stream);
  Request dev = comm_->allReduceAsync(d, d, count, priocclInt32, priocclSum, 0);
  prioccl::setStream(nullptr);
  Request onHost =
      comm_->allReduceAsync(host.data(), gotHost.data(), other, priocclInt64, priocclMax, 0);
  dev.wait();
  onHost.wait();
  EXPECT_EQ(g_device->download(d, count * 4), expect);
  EXPECT_EQ(gotHost, expectHost);
  g_device->sync(stream);
}

// A held stream and priorities: a bulk op holds the stream, and an urgent op submitted after it
// on the same stream needs the bulk op's end before its input is ready. Both must finish: the
// urgent op enters the engine only once its input is ready, so nothing waits for an op planned
// after it (a wait on the device, or a staging copy blocking on the stream, would deadlock).
TEST_F(DeviceBuffers, UrgentOpBehindAHeldStreamFinishes) {
  const int r = worldRank();
  const size_t big = 400000 / kSanitizerShrink, small = 100;
  void* stream = g_device->newStream();
  auto a = bytesOf(2300 + r, big * 4), b = bytesOf(2400 + r, small * 4);
  std::vector<unsigned char> ea(big * 4), eb(small * 4);
  comm_->allReduceAsync(a.data(), ea.data(), big, priocclUint32, priocclSum, 5).wait();
  comm_->allReduceAsync(b.data(), eb.data(), small, priocclUint32, priocclSum, 0).wait();
  unsigned char *da = g_device->upload(a), *db = g_device->upload(b);
  if (g_fake) g_fake->delayUs = 2000;  // the bulk op's copies take a while
  prioccl::setStream(stream, true);
  Request bulk = comm_->allReduceAsync(da, da, big, priocclUint32, priocclSum, 5);
  Request urgent = comm_->allReduceAsync(db, db, small, priocclUint32, priocclSum, 0);
  prioccl::setStream(nullptr);
  urgent.wait();
  bulk.wait();
  if (g_fake) g_fake->delayUs = 0;
  EXPECT_EQ(g_device->download(da, big * 4), ea);
  EXPECT_EQ(g_device->download(db, small * 4), eb);
  g_device->sync(stream);
}

// The thread's stream through the C ABI: set, read back, refused flags.
TEST_F(DeviceBuffers, StreamSettingThroughTheCAbi) {
  void* stream = g_device->newStream();
  ASSERT_EQ(priocclSetStream(stream, PRIOCCL_STREAM_HOLD), priocclSuccess);
  void* got = nullptr;
  int flags = -1;
  ASSERT_EQ(priocclGetStream(&got, &flags), priocclSuccess);
  EXPECT_EQ(got, stream);
  EXPECT_EQ(flags, PRIOCCL_STREAM_HOLD);
  EXPECT_EQ(priocclSetStream(nullptr, 4), priocclInvalidArgument);
  ASSERT_EQ(priocclGetStream(&got, &flags), priocclSuccess);  // unchanged by the refusal
  EXPECT_EQ(got, stream);
  ASSERT_EQ(priocclSetStream(nullptr, 0), priocclSuccess);
  ASSERT_EQ(priocclGetStream(&got, &flags), priocclSuccess);
  EXPECT_EQ(got, nullptr);
  EXPECT_EQ(flags, 0);
}

// The other training modes compute on the host: device buffers are refused, naming the mode.
TEST_F(DeviceBuffers, ModesRefuseDeviceBuffers) {
  std::vector<float> host(8, 1.0f);
  unsigned char* d = g_device->upload(std::vector<unsigned char>(8 * 4, 0));
  EXPECT_EQ(priocclGluUpdate(d, host.data(), host.data(), 8, priocclFloat32, 0.1, 0.5, 0.5, 0.0,
                             0.0, 0.1, 2),
            priocclInvalidArgument);
  EXPECT_NE(std::string(priocclGetLastError(nullptr)).find("device memory"), std::string::npos)
      << priocclGetLastError(nullptr);
  EXPECT_EQ(priocclSgdUpdate(host.data(), host.data(), d, 8, priocclFloat32, 0.1, 0.9, 0.0),
            priocclInvalidArgument);
}

}  // namespace
