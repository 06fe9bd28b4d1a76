// Device buffers over the host transports (MPI, UCX, mpi-coll): an op whose buffers are device
// memory runs on pinned host copies of them.
//
// Its input (the send buffer; a v-variant's receive buffer too, whose gaps must come back
// unchanged) is copied in piece by piece by a worker thread, while the op already runs: the
// engine starts a chunk once its part of the input is in (OpState::staging, op.h), and a finished
// chunk's (or collective launch's) result is copied back at once (the kinds cut into slices of
// elements: OpState::sliced; the others' results go back when the op ends). Ops up to `syncBytes`
// are copied in on the caller's thread instead, before submission: a worker's round trip would cost
// a small op more than its copy. An op whose stream still has work queued before it is copied
// in only once that work is done (begin(), from the stream gate). The worker takes the most urgent
// op's copies first, and completes the caller's request once the result is back, so the progress
// thread never waits for a device. A failed op copies nothing more back (chunks that finished
// before the failure are back, as a host buffer holds them).
//
// Reductions run on the host, on the staged data (docs/architecture.md, "Device buffers").
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <thread>

#include "core/op.h"
#include "device/device_memory.h"

namespace prioccl::detail {

class DeviceStager {
 public:
  // `poke`: tells the engine that an op's input arrived; `abort`: fails the communicator (a copy
  // to the host failed, so an op would wait for its input forever). Both from the worker, safe
  // after the engine is gone. `syncBytes`: inputs up to this are copied on the caller's thread.
  DeviceStager(device::DeviceMemory& memory, size_t syncBytes, std::function<void()> poke,
               std::function<void()> abort);
  // Stops the worker once its queue is empty. A staged op may outlive the stager (a group's
  // deferred op, failed after its communicator went): its last copies then run on the thread
  // that finishes it.
  ~DeviceStager();
  DeviceStager(const DeviceStager&) = delete;
  DeviceStager& operator=(const DeviceStager&) = delete;

  // `op`'s device buffers (sendBytes of device memory at op.send, recvBytes at op.recv; 0 where
  // the buffer is host memory or unused, as the caller found out): points them at pinned host
  // copies, sets op.staging, and returns the state the caller's Request must follow, completed
  // once the result is back on the device; `op` itself goes to the engine as before. Null when
  // both are 0. `keepRecv`: the receive
  // buffer is not written whole (gaps between v-variant blocks): it is copied in as well.
  // `streamBusy`: the user's stream still has work queued before the op (its fence, OpState::fence,
  // is not ready): nothing is copied in until begin().
  std::shared_ptr<OpState> stage(OpState& op, size_t sendBytes, size_t recvBytes, bool keepRecv,
                                 bool streamBusy);
  // The op's stream is done with the work before it (api/stream_gate.h): a staged op held back by
  // stage()'s `streamBusy` starts copying its input in. Nothing for other ops.
  void begin(OpState& op);

  // The engine has stopped; `transportStopped`: its transport promised that no transfer still
  // touches a buffer (Transport::quiesce). Only then are failed ops' blocks freed at the end
  // (they are never reused: a cancelled receive may still write into them).
  void trafficEnded(bool transportStopped);

 private:
  struct Core;
  struct Staged;
  std::shared_ptr<Core> core_;
  std::thread worker_;
};

}  // namespace prioccl::detail
