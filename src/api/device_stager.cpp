// Device buffers staged through pinned host memory (device_stager.h).
#include "api/device_stager.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/error.h"

namespace prioccl::detail {

namespace {
// Blocks are rounded up to this, so ops of similar sizes share them.
constexpr size_t kGrain = 64 << 10;
}  // namespace

DeviceStager::HostPool::~HostPool() {
  for (auto& [bytes, block] : free_) memory_.freeHost(block);
}

// The smallest free block that fits and wastes at most half of itself; else a new one.
unsigned char* DeviceStager::HostPool::take(size_t bytes) {
  bytes = (std::max<size_t>(bytes, 1) + kGrain - 1) / kGrain * kGrain;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first / 2 <= bytes) {
      unsigned char* block = it->second;
      freeBytes_ -= it->first;
      free_.erase(it);
      return block;
    }
  }
  return static_cast<unsigned char*>(memory_.allocHost(bytes));
}

void DeviceStager::HostPool::give(unsigned char* block, size_t bytes) {
  if (!block) return;
  bytes = (std::max<size_t>(bytes, 1) + kGrain - 1) / kGrain * kGrain;
  std::lock_guard<std::mutex> lock(mutex_);
  free_.emplace(bytes, block);
  freeBytes_ += bytes;
}

DeviceStager::~DeviceStager() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

uint64_t DeviceStager::staged() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mutex_));
  return staged_;
}

std::shared_ptr<OpState> DeviceStager::stage(OpState& op, size_t sendBytes, size_t recvBytes,
                                             bool prefillRecv) {
  auto onDevice = [&](const void* p, size_t n) { return p && n > 0 && memory_.isDevice(p); };
  const bool sendDev = onDevice(op.send, sendBytes), recvDev = onDevice(op.recv, recvBytes);
  if (!sendDev && !recvDev) return nullptr;

  auto s = std::make_shared<Staged>();
  // Blocks go back to the pool if a copy in fails (the op is then never submitted).
  struct Undo {
    DeviceStager* self;
    Staged* s;
    bool armed = true;
    ~Undo() {
      if (armed) self->release(*s);
    }
  } undo{this, s.get()};
  auto block = [&](size_t bytes) {
    s->blocks.push_back({pool_.take(bytes), bytes});
    return s->blocks.back().host;
  };
  const auto S = reinterpret_cast<uintptr_t>(op.send), R = reinterpret_cast<uintptr_t>(op.recv);
  if (sendDev && recvDev && S < R + recvBytes && R < S + sendBytes) {
    // In place (or an in-place form: one buffer inside the other): one block over both, so the
    // host op sees the same relation between its buffers.
    const uintptr_t lo = std::min(S, R), hi = std::max(S + sendBytes, R + recvBytes);
    unsigned char* host = block(hi - lo);
    memory_.copy(host, reinterpret_cast<const void*>(lo), hi - lo);
    s->deviceRecv = op.recv;
    op.send = host + (S - lo);
    op.recv = host + (R - lo);
  } else {
    if (sendDev) {
      unsigned char* host = block(sendBytes);
      memory_.copy(host, op.send, sendBytes);
      op.send = host;
    }
    if (recvDev) {
      unsigned char* host = block(recvBytes);
      if (prefillRecv) memory_.copy(host, op.recv, recvBytes);
      s->deviceRecv = op.recv;
      op.recv = host;
    }
  }
  s->hostRecv = op.recv;
  s->recvBytes = s->deviceRecv ? recvBytes : 0;
  s->priority = op.priority;
  s->user = std::make_shared<OpState>();
  s->user->kind = op.kind;
  s->user->priority = op.priority;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s->order = order_++;
    ++staged_;
  }
  // Registered before the op is submitted: nothing else touches its callbacks yet.
  op.callbacks.push_back([self = shared_from_this(), s](priocclResult_t code,
                                                        const std::string& error) {
    self->finished(s, code, error);
  });
  undo.armed = false;
  return s->user;
}

// The host op finished (progress thread, or whoever failed it). Nothing to copy back, or a
// failure: completes the caller's request here; else the worker copies the result back.
void DeviceStager::finished(const std::shared_ptr<Staged>& s, priocclResult_t code,
                            const std::string& error) {
  if (code != priocclSuccess || !s->deviceRecv) {
    release(*s);
    s->user->finish(code, error);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push(s);
    if (!worker_.joinable()) worker_ = std::thread([this] { work(); });
  }
  cv_.notify_one();
}

void DeviceStager::copyBack(Staged& s) {
  priocclResult_t code = priocclSuccess;
  std::string error;
  try {
    memory_.copy(s.deviceRecv, s.hostRecv, s.recvBytes);
  } catch (const Error& e) {
    code = e.code();
    error = concat(kindName(s.user->kind), ": copying the result back to the device buffer: ",
                   e.what());
  }
  release(s);
  s.user->finish(code, error);
}

void DeviceStager::release(Staged& s) {
  for (Block& b : s.blocks) pool_.give(b.host, b.bytes);
  s.blocks.clear();
}

void DeviceStager::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to copy back
    std::shared_ptr<Staged> s = queue_.top();
    queue_.pop();
    lock.unlock();
    copyBack(*s);
    lock.lock();
  }
}

}  // namespace prioccl::detail
