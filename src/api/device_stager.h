// Device buffers over the host transports (MPI, UCX, mpi-coll): an op whose buffers are device
// memory runs on pinned host copies of them. The caller's thread copies the data in before the op
// is submitted (so ops keep their submission order, which unnamed ops are matched by); a worker
// thread copies the result back once the host op finished, most urgent op first, and only then
// completes the caller's request, so the progress thread never waits for a device. A failed op
// copies nothing back: the device buffer keeps what it held.
//
// Not done (docs/architecture.md): overlapping the copies with one op's own transfers (per chunk)
// and reducing on the device; the reductions run on the host, on the staged data.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "core/op.h"
#include "device/device_memory.h"

namespace prioccl::detail {

class DeviceStager : public std::enable_shared_from_this<DeviceStager> {
 public:
  explicit DeviceStager(device::DeviceMemory& memory) : memory_(memory) {}
  // Copies back what is queued, then stops the worker. Ops hold the stager until they finish
  // (a group's deferred op may outlive its communicator), so the last holder may be any thread.
  ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  // If `op`'s buffers (sendBytes at op.send, recvBytes at op.recv; 0 where unused) include device
  // memory: points them at pinned host copies (the data copied in, blocking) and returns the
  // state the caller's Request must follow, completed once the result is back on the device;
  // `op` itself goes to the engine as before. Null when nothing is on a device.
  // `prefillRecv`: the receive buffer is not written whole (gaps between v-variant blocks), so
  // its device contents are copied in as well and go back unchanged.
  std::shared_ptr<OpState> stage(OpState& op, size_t sendBytes, size_t recvBytes,
                                 bool prefillRecv);

  // Staged ops since creation (tests read it to know the path was taken).
  uint64_t staged() const;

 private:
  // Pinned blocks kept for reuse, by size. Memory stays pinned until the communicator goes.
  class HostPool {
   public:
    explicit HostPool(device::DeviceMemory& memory) : memory_(memory) {}
    ~HostPool();
    unsigned char* take(size_t bytes);
    void give(unsigned char* block, size_t bytes);

   private:
    device::DeviceMemory& memory_;
    std::mutex mutex_;
    std::multimap<size_t, unsigned char*> free_;
    size_t freeBytes_ = 0;
  };
  struct Block {
    unsigned char* host = nullptr;
    size_t bytes = 0;
  };
  // One staged op: its blocks and where its result goes.
  struct Staged {
    std::shared_ptr<OpState> user;
    int priority = 0;
    uint64_t order = 0;
    std::vector<Block> blocks;
    void* deviceRecv = nullptr;  // null: nothing to copy back
    const void* hostRecv = nullptr;
    size_t recvBytes = 0;
  };
  struct MoreUrgentLast {
    bool operator()(const std::shared_ptr<Staged>& a, const std::shared_ptr<Staged>& b) const {
      return a->priority != b->priority ? a->priority > b->priority : a->order > b->order;
    }
  };

  void finished(const std::shared_ptr<Staged>& s, priocclResult_t code, const std::string& error);
  void copyBack(Staged& s);
  void release(Staged& s);
  void work();

  device::DeviceMemory& memory_;
  HostPool pool_{memory_};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::priority_queue<std::shared_ptr<Staged>, std::vector<std::shared_ptr<Staged>>,
                      MoreUrgentLast>
      queue_;  // finished host ops whose result goes back, most urgent on top
  bool stopping_ = false;
  uint64_t order_ = 0, staged_ = 0;
  std::thread worker_;  // started with the first op to copy back
};

}  // namespace prioccl::detail
