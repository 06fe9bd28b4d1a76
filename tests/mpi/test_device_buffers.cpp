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
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
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

 private:
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
  unsigned char* upload(const std::vector<unsigned char>& bytes) override {
    unsigned char* p = alloc(bytes.size());
    if (cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice) != cudaSuccess)
      std::abort();
    return p;
  }
  std::vector<unsigned char> download(const void* p, size_t bytes) override {
    std::vector<unsigned char> h(bytes);
    if (cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) std::abort();
    return h;
  }

 private:
  std::vector<void*> blocks_;
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
