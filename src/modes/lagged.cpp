// Last Batch Optimization: the fused all-reduce of step t overlaps step t+1's forward and
// backward; step t+1 hands its result to the optimizer. Two staging buffers: the one in flight,
// and the one the caller's gradient is copied into (which held the result returned last). They are
// host memory, or device memory where the collectives take only that (PRIOCCL_TRANSPORT=nccl);
// the caller's buffers may be either, on any transport (device::copyAny).
#include <cstdint>
#include <vector>

#include "api/op_rules.h"
#include "common/error.h"
#include "device/device_memory.h"
#include "modes/agree.h"
#include "prioccl/modes.hpp"
#include "reduce/reduce.h"

namespace prioccl {

using detail::fail;

struct LaggedAllReduce::State {
  Communicator comm;
  size_t count = 0, bytes = 0;
  priocclDataType_t datatype = priocclFloat32;
  priocclRedOp_t op = priocclSum;
  Options options;
  std::vector<unsigned char> hostStaging[2];
  device::DeviceBuffer deviceStaging[2];
  unsigned char* staging[2] = {nullptr, nullptr};
  Request pending;
  int pendingSlot = -1;  // staging slot of the op in flight, -1 if none
  const void* result = nullptr;
  long steps = 0;

  void copyOut(int slot, void* out) {
    result = staging[slot];
    if (out) device::copyAny(out, result, bytes);
  }
};

LaggedAllReduce::LaggedAllReduce(const Communicator& comm, size_t count, priocclDataType_t datatype,
                                 priocclRedOp_t op, const Options& options)
    : s_(std::make_unique<State>()) {
  detail::validateEnums(datatype, op);
  if (!comm.valid()) fail(priocclInvalidUsage, "LaggedAllReduce: the communicator is not live");
  if (options.warmupSteps < 0)
    fail(priocclInvalidArgument, "LaggedAllReduce: warmupSteps ", options.warmupSteps, " < 0");
  if (options.key.empty()) fail(priocclInvalidArgument, "LaggedAllReduce: empty key");
  if (count > SIZE_MAX / 2 / reduce::dtypeSize(datatype))  // two staging buffers of it
    fail(priocclInvalidArgument, "LaggedAllReduce: count ", count, " of ",
         reduce::dtypeName(datatype), " overflows the address space");
  // Every rank must build the same object, or its ops would fail one by one much later.
  detail::agreeAcrossRanks(comm, "LaggedAllReduce",
                           {{"count", static_cast<long long>(count)},
                            {"datatype", static_cast<long long>(datatype)},
                            {"op", static_cast<long long>(op)},
                            {"warmupSteps", options.warmupSteps}});
  s_->comm = comm;
  s_->count = count;
  s_->bytes = count * reduce::dtypeSize(datatype);
  s_->datatype = datatype;
  s_->op = op;
  s_->options = options;
  device::DeviceMemory* memory = device::current();
  for (int i = 0; i < 2; ++i) {
    if (detail::collectivesOnDevice(comm) && memory) {
      s_->deviceStaging[i] = device::DeviceBuffer(*memory, s_->bytes);
      s_->staging[i] = static_cast<unsigned char*>(s_->deviceStaging[i].data());
    } else {
      s_->hostStaging[i].resize(s_->bytes);
      s_->staging[i] = s_->hostStaging[i].data();
    }
  }
}

LaggedAllReduce::~LaggedAllReduce() {
  try {
    destroy();
  } catch (...) {  // the op's failure was the caller's to collect; the buffers are released
  }
}

bool LaggedAllReduce::step(const void* grads, void* out) {
  if (!s_) fail(priocclInvalidUsage, "LaggedAllReduce::step after destroy()");
  State& s = *s_;
  if (s.bytes && !grads) fail(priocclInvalidArgument, "LaggedAllReduce::step: grads is NULL");
  if (s.steps < s.options.warmupSteps) {  // synchronous: S-SGD
    void* into = out ? out : s.staging[0];
    s.comm.allReduce(grads, into, s.count, s.datatype, s.op);
    s.result = into;
    ++s.steps;
    return true;
  }
  int slot = s.pendingSlot == 0 ? 1 : 0;
  device::copyAny(s.staging[slot], grads, s.bytes);
  Request started = s.comm.allReduceAsync(s.staging[slot], s.staging[slot], s.count, s.datatype,
                                          s.op, s.options.priority, s.options.key);
  Request previous = s.pending;
  int previousSlot = s.pendingSlot;
  s.pending = started;
  s.pendingSlot = slot;
  ++s.steps;
  if (previousSlot < 0) return false;  // the switch step: no aggregate yet
  previous.wait();  // the older op: submitted first, same priority, so it finishes first
  s.copyOut(previousSlot, out);
  return true;
}

bool LaggedAllReduce::flush(void* out) {
  if (!s_) fail(priocclInvalidUsage, "LaggedAllReduce::flush after destroy()");
  State& s = *s_;
  if (s.pendingSlot < 0) return false;
  int slot = s.pendingSlot;
  s.pendingSlot = -1;
  s.pending.wait();
  s.copyOut(slot, out);
  return true;
}

const void* LaggedAllReduce::result() const {
  return s_ ? s_->result : nullptr;
}

long LaggedAllReduce::steps() const {
  if (!s_) fail(priocclInvalidUsage, "LaggedAllReduce::steps after destroy()");
  return s_->steps;
}

void LaggedAllReduce::destroy() {
  if (!s_) return;
  std::unique_ptr<State> s = std::move(s_);
  // The engine may still read and write the staging buffer: wait before freeing it.
  if (s->pendingSlot >= 0) s->pending.wait();
}

}  // namespace prioccl
