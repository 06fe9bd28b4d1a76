// Device buffers staged through pinned host memory (device_stager.h).
#include "api/device_stager.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"

namespace prioccl::detail {

namespace {
// Pinned blocks are rounded up to this, so ops of similar sizes share them.
constexpr size_t kGrain = 64 << 10;

size_t rounded(size_t bytes) {
  return (std::max<size_t>(bytes, 1) + kGrain - 1) / kGrain * kGrain;
}
}  // namespace

// What the stager's ops share with its worker; staged ops hold it too, as they may outlive the
// stager.
struct DeviceStager::Core {
  enum class What { kCopyIn, kCopyOut, kFinish };
  struct Task {
    What what = What::kCopyIn;
    std::shared_ptr<Staged> op;
    uint64_t seq = 0;  // FIFO among one op's tasks: its result copies before its finish
    size_t offset = 0, bytes = 0;
    priocclResult_t code = priocclSuccess;  // kFinish: the host op's outcome
    std::string error;
  };

  Core(device::DeviceMemory& m, size_t sync, std::function<void()> p, std::function<void()> a)
      : memory(m), syncBytes(std::max<size_t>(sync, 1)), poke(std::move(p)), abort(std::move(a)) {}
  ~Core() {
    for (auto& [bytes, block] : freeBlocks) memory.freeHost(block);
    // A failed op's blocks: cancelled receives may still write into them (transport.h,
    // cancelAll), so they are freed only once the transport has stopped for good, and otherwise
    // stay allocated for the process's life, as the chunk runner's scratch does.
    if (transportStopped)
      for (unsigned char* block : heldBlocks) memory.freeHost(block);
  }

  unsigned char* take(size_t bytes);
  void give(unsigned char* block, size_t bytes);
  void hold(unsigned char* block);  // a failed op's: never reused
  void enqueue(Task t);
  // The worker copies `op`'s input in, piece by piece.
  void copyInLater(std::shared_ptr<Staged> op) {
    Task t;
    t.what = What::kCopyIn;
    t.op = std::move(op);
    enqueue(std::move(t));
  }
  void run(Task& t);
  void work();

  device::DeviceMemory& memory;
  const size_t syncBytes;  // also the worker's copy-in piece
  const std::function<void()> poke, abort;
  std::mutex blocksMutex;
  std::multimap<size_t, unsigned char*> freeBlocks;  // pinned, by size, kept for reuse
  std::vector<unsigned char*> heldBlocks;            // failed ops' (hold())
  std::atomic<bool> transportStopped{false};         // DeviceStager::trafficEnded(true)
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<Task> queue;  // a heap, most urgent op's first task on top (Later)
  uint64_t seq = 0, opOrder = 0;
  bool stopping = false;  // no worker from now on: tasks run where they are queued
};

struct DeviceStager::Staged final : Staging, std::enable_shared_from_this<Staged> {
  struct Segment {
    unsigned char* host;
    const unsigned char* device;
    size_t bytes;
  };
  struct Block {
    unsigned char* host;
    size_t bytes;
  };

  bool inputReady(size_t bytes) const override {
    return copiedIn.load(std::memory_order_acquire) >= std::min(bytes, inTotal);
  }
  void resultDone(size_t offset, size_t bytes) override {
    if (!deviceRecv || bytes == 0) return;
    sentBack = true;
    Core::Task t;
    t.what = Core::What::kCopyOut;
    t.op = shared_from_this();
    t.offset = offset;
    t.bytes = bytes;
    core->enqueue(std::move(t));
  }
  // Copies the next piece of the input (worker or caller); false: a copy failed.
  bool copyIn(size_t limit);
  // Its blocks go back for reuse; after a failure in the engine (`failed`) they are held.
  void release(bool failed = false) {
    for (Block& b : blocks) failed ? core->hold(b.host) : core->give(b.host, b.bytes);
    blocks.clear();
  }
  // An op that never reached the engine (a throw after staging, a destroyed communicator) ends
  // here without its finish: its blocks go back all the same.
  ~Staged() override { release(); }

  std::shared_ptr<Core> core;
  std::shared_ptr<OpState> user;  // what the caller's Request follows
  bool deferred = false;          // its stream was busy: copied in from begin()
  OpState::Kind kind = OpState::Kind::kAllReduce;
  int priority = 0;
  uint64_t order = 0;
  std::vector<Block> blocks;
  std::vector<Segment> in;  // the input, in the order it is copied
  size_t inTotal = 0;
  size_t cursor = 0;                    // bytes copied in so far (the copier's own count)
  std::atomic<size_t> copiedIn{0};      // ... published to the progress thread
  unsigned char* deviceRecv = nullptr;  // null: no result goes to a device
  const unsigned char* hostRecv = nullptr;
  size_t recvBytes = 0;
  bool sentBack = false;           // a chunk's result went back (then every chunk's does)
  std::atomic<bool> ended{false};  // the host op finished: copies in are pointless
  priocclResult_t copyCode = priocclSuccess;  // the first failed copy (worker)
  std::string copyError;
};

unsigned char* DeviceStager::Core::take(size_t bytes) {
  bytes = rounded(bytes);
  {
    std::lock_guard<std::mutex> lock(blocksMutex);
    auto it = freeBlocks.lower_bound(bytes);
    if (it != freeBlocks.end() && it->first / 2 <= bytes) {  // wastes at most half of it
      unsigned char* block = it->second;
      freeBlocks.erase(it);
      return block;
    }
  }
  return static_cast<unsigned char*>(memory.allocHost(bytes));
}

void DeviceStager::Core::give(unsigned char* block, size_t bytes) {
  if (!block) return;
  std::lock_guard<std::mutex> lock(blocksMutex);
  freeBlocks.emplace(rounded(bytes), block);
}

void DeviceStager::Core::hold(unsigned char* block) {
  if (!block) return;
  std::lock_guard<std::mutex> lock(blocksMutex);
  heldBlocks.push_back(block);
}

namespace {
// std::push_heap's order: the most urgent op on top, then the op staged first, then FIFO.
template <typename Task>
bool later(const Task& a, const Task& b) {
  if (a.op->priority != b.op->priority) return a.op->priority > b.op->priority;
  if (a.op->order != b.op->order) return a.op->order > b.op->order;
  return a.seq > b.seq;
}
}  // namespace

void DeviceStager::Core::enqueue(Task t) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!stopping) {
      t.seq = seq++;
      queue.push_back(std::move(t));
      std::push_heap(queue.begin(), queue.end(), later<Task>);
      cv.notify_one();
      return;
    }
  }
  run(t);  // no worker any more
}

bool DeviceStager::Staged::copyIn(size_t limit) {
  size_t at = 0;
  for (const Segment& seg : in) {
    if (cursor < at + seg.bytes && limit > 0) {
      const size_t from = cursor - at, n = std::min(seg.bytes - from, limit);
      try {
        core->memory.stageCopy(seg.host + from, seg.device + from, n);
      } catch (const Error& e) {
        copyCode = e.code();
        copyError =
            concat(kindName(kind), ": copying the input from the device buffer: ", e.what());
        return false;
      }
      cursor += n;
      limit -= n;
    }
    at += seg.bytes;
  }
  copiedIn.store(cursor, std::memory_order_release);
  return true;
}

void DeviceStager::Core::run(Task& t) {
  Staged& s = *t.op;
  switch (t.what) {
    case What::kCopyIn: {
      if (s.ended.load(std::memory_order_acquire)) return;  // failed meanwhile
      if (!s.copyIn(syncBytes)) {
        // The op would wait for its input forever: stop it (and the communicator: the device
        // is in trouble); its request gets the copy's error (kFinish).
        abort();
        return;
      }
      poke();
      // The next piece, unless a more urgent op's copy is due first.
      if (s.cursor < s.inTotal) enqueue(std::move(t));
      return;
    }
    case What::kCopyOut:
      if (s.copyCode != priocclSuccess) return;
      try {
        memory.stageCopy(s.deviceRecv + t.offset, s.hostRecv + t.offset, t.bytes);
      } catch (const Error& e) {
        s.copyCode = e.code();
        s.copyError =
            concat(kindName(s.kind), ": copying the result back to the device buffer: ", e.what());
      }
      return;
    case What::kFinish: {
      priocclResult_t code = t.code;
      std::string error = t.error;
      if (code == priocclSuccess && s.deviceRecv && !s.sentBack && s.copyCode == priocclSuccess) {
        Task whole = t;
        whole.what = What::kCopyOut;
        whole.offset = 0;
        whole.bytes = s.recvBytes;
        run(whole);
      }
      if (s.copyCode != priocclSuccess) {
        code = s.copyCode;
        error = s.copyError;
      }
      // t.code: the host op's own outcome; a failed one may have left transfers behind.
      s.release(t.code != priocclSuccess);
      s.user->finish(code, error);
      return;
    }
  }
}

void DeviceStager::Core::work() {
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    cv.wait(lock, [&] { return stopping || !queue.empty(); });
    if (queue.empty()) return;  // stopping, and nothing left
    std::pop_heap(queue.begin(), queue.end(), later<Task>);
    Task t = std::move(queue.back());
    queue.pop_back();
    lock.unlock();
    run(t);
    t.op.reset();  // outside the lock: it may be the op's last holder
    lock.lock();
  }
}

DeviceStager::DeviceStager(device::DeviceMemory& memory, size_t syncBytes,
                           std::function<void()> poke, std::function<void()> abort)
    : core_(std::make_shared<Core>(memory, syncBytes, std::move(poke), std::move(abort))) {
  worker_ = std::thread([core = core_] {
    pthread_setname_np(pthread_self(), "prioccl-stager");
    core->work();
  });
}

void DeviceStager::trafficEnded(bool transportStopped) {
  core_->transportStopped.store(transportStopped, std::memory_order_release);
}

DeviceStager::~DeviceStager() {
  {
    std::lock_guard<std::mutex> lock(core_->mutex);
    core_->stopping = true;
  }
  core_->cv.notify_all();
  worker_.join();  // after the queue is empty
}

std::shared_ptr<OpState> DeviceStager::stage(OpState& op, size_t sendBytes, size_t recvBytes,
                                             bool keepRecv, bool streamBusy) {
  Core& core = *core_;
  const bool sendDev = op.send && sendBytes > 0, recvDev = op.recv && recvBytes > 0;
  if (!sendDev && !recvDev) return nullptr;

  auto s = std::make_shared<Staged>();
  s->core = core_;
  s->kind = op.kind;
  s->priority = op.priority;
  auto block = [&](size_t bytes) {
    s->blocks.push_back({core.take(bytes), bytes});
    return s->blocks.back().host;
  };
  auto dev = [](const void* p) { return static_cast<const unsigned char*>(p); };
  const auto S = reinterpret_cast<uintptr_t>(op.send), R = reinterpret_cast<uintptr_t>(op.recv);
  if (sendDev && recvDev && S < R + recvBytes && R < S + sendBytes) {
    // In place (or an in-place form: one buffer inside the other): one block over both, so the
    // host op sees the same relation between its buffers; all of it is input.
    const uintptr_t lo = std::min(S, R), hi = std::max(S + sendBytes, R + recvBytes);
    unsigned char* host = block(hi - lo);
    s->in.push_back({host, dev(reinterpret_cast<const void*>(lo)), hi - lo});
    s->deviceRecv = static_cast<unsigned char*>(op.recv);
    op.send = host + (S - lo);
    op.recv = host + (R - lo);
  } else {
    if (sendDev) {
      unsigned char* host = block(sendBytes);
      s->in.push_back({host, dev(op.send), sendBytes});
      op.send = host;
    }
    if (recvDev) {
      unsigned char* host = block(recvBytes);
      if (keepRecv) s->in.push_back({host, dev(op.recv), recvBytes});
      s->deviceRecv = static_cast<unsigned char*>(op.recv);
      op.recv = host;
    }
  }
  for (const auto& seg : s->in) s->inTotal += seg.bytes;
  s->hostRecv = static_cast<const unsigned char*>(op.recv);
  s->recvBytes = s->deviceRecv ? recvBytes : 0;
  // A small input now, on this thread; a large one by the worker, piece by piece, while the op
  // runs; either only once the user's stream is done with the work before the op (begin()).
  s->deferred = streamBusy;
  const bool now = !streamBusy && s->inTotal <= core.syncBytes;
  if (now && !s->copyIn(s->inTotal)) fail(s->copyCode, s->copyError);
  const bool byWorker = !now && !streamBusy;
  s->user = std::make_shared<OpState>();
  s->user->kind = op.kind;
  s->user->priority = op.priority;
  {
    std::lock_guard<std::mutex> lock(core.mutex);
    s->order = core.opOrder++;
  }
  op.staging = s;
  // Registered before the op is submitted: nothing else touches its callbacks yet.
  op.callbacks.push_back([s](priocclResult_t code, const std::string& error) {
    s->ended.store(true, std::memory_order_release);
    Core::Task t;
    t.what = Core::What::kFinish;
    t.op = s;
    t.code = code;
    t.error = error;
    s->core->enqueue(std::move(t));
  });
  if (byWorker) core.copyInLater(s);
  return s->user;
}

void DeviceStager::begin(OpState& op) {
  auto* s = dynamic_cast<Staged*>(op.staging.get());
  if (!s || !s->deferred) return;
  s->deferred = false;
  core_->copyInLater(s->shared_from_this());
}

}  // namespace prioccl::detail
