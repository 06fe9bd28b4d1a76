// An op's way into CommImpl (comm_impl.h): the argument rules (op_rules.h), the op's state, its
// buffers' placement (device buffers: NCCL or staged host copies), groups and fusion, the stream
// gate, and the hand-off to the engine.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "api/comm_impl.h"
#include "api/fusion.h"
#include "api/group.h"
#include "api/op_rules.h"
#include "api/shape.h"
#include "device/device_memory.h"
#include "reduce/reduce.h"

namespace prioccl::detail {

Request CommImpl::submit(const OpDesc& d, bool callerWaits) {
  const uint64_t shape = shape::takeNext();  // taken first: a failing call must not leave it
  validateEnums(d.dtype, d.op);              // before anything loads them as enums
  switch (familyOf(d.kind)) {
    case OpFamily::kCollectiveV:
      return collectiveV(d, shape, callerWaits);  // their counts' digest, and the shape's
    case OpFamily::kPointToPoint:
      return pointToPoint(d);  // matched by order and count only
    case OpFamily::kCollective:
      break;
  }
  return collective(d, shape, callerWaits);
}

void CommImpl::run(const OpDesc& d) {
  group::waitOrDefer(submit(d, true));
}

Request CommImpl::collective(const OpDesc& d, uint64_t shape, bool callerWaits) {
  const CollectiveExtents x = checkCollective(d, rank_, size_);
  auto state = makeOp(x.send, x.recv, d.count, d.dtype,
                      d.kind == OpState::Kind::kBroadcast ? priocclSum : d.op);
  state->kind = d.kind;
  state->root = x.root;
  state->layout = shape;  // compared across ranks (Announce::layout)
  return submitCollective(state, d, callerWaits, {x.sendBytes, x.recvBytes, false});
}

Request CommImpl::collectiveV(const OpDesc& d, uint64_t shape, bool callerWaits) {
  auto state = makeOp(d.send, d.recv, 0, d.dtype,
                      d.kind == OpState::Kind::kReduceScatterV ? d.op : priocclSum);
  const Extents extents = fillCollectiveV(*state, d, rank_, size_);
  // Equal counts from tensors of different shapes (Horovod fails those): the shape joins the
  // counts' digest (an all-to-all's counts are checked pairwise, without a layout).
  if (shape != 0 && state->layout != 0)
    state->layout = layoutDigest({static_cast<size_t>(state->layout), static_cast<size_t>(shape)});
  return submitCollective(state, d, callerWaits, extents);
}

CommImpl::Extents CommImpl::fillCollectiveV(OpState& state, const OpDesc& d, int rank, int size) {
  using Kind = OpState::Kind;
  CollectiveVLayout v = checkCollectiveV(d, rank, size);
  state.kind = d.kind;
  state.count = v.largest;
  state.sendCounts = std::move(v.sendCounts);
  state.sendDispls = std::move(v.sendDispls);
  state.recvCounts = std::move(v.recvCounts);
  state.recvDispls = std::move(v.recvDispls);
  if (d.kind == Kind::kAllToAllV) {
    PairTerms t = pairTerms(rank, state.sendCounts, state.recvCounts);
    state.pairDigest = t.digest;
    state.pairCount = t.count;
    state.pairWhere = t.where;
  } else {
    state.layout = layoutDigest(d.kind == Kind::kAllGatherV ? state.recvCounts : state.sendCounts);
  }
  const size_t elem = reduce::dtypeSize(d.dtype);
  // Blocks may leave gaps in the receive buffer, which a staged copy must carry unchanged.
  return {v.sendElems * elem, v.recvElems * elem, d.kind != Kind::kReduceScatterV};
}

int CommImpl::join() {
  if (group::active())
    fail(priocclInvalidUsage,
         "join: not inside a group (priocclGroupStart): it blocks until "
         "every rank has joined");
  if (deviceCollectives_)
    fail(priocclInvalidUsage,
         "join: not available with PRIOCCL_TRANSPORT=nccl (a joined rank answers the others' "
         "ops from host buffers, which NCCL cannot take)");
  OpDesc d =
      named(collectiveOp(OpState::Kind::kJoin, nullptr, nullptr, 0, priocclUint8), "prioccl.join");
  auto state = makeOp(nullptr, nullptr, 0, priocclUint8, priocclSum);
  state->kind = d.kind;
  submitCollective(state, d, true, Extents()).wait();
  return state->root;  // written before the op finished
}

Request CommImpl::submitCollective(const std::shared_ptr<OpState>& state, const OpDesc& d,
                                   bool callerWaits, const Extents& extents) {
  state->priority = d.priority;
  if (d.named) {
    state->named = true;
    state->key = std::string(d.key);
  }
  state->errorLog = errors_;
  std::shared_ptr<OpState> user = placeBuffers(*state, extents);
  std::lock_guard<std::mutex> lock(mutex_);
  requireLive();
  submitOrDefer(state, callerWaits && !user);  // a staged op completes off the engine's path
  return Request(user ? user : state);
}

std::shared_ptr<OpState> CommImpl::placeBuffers(OpState& op, const Extents& extents) {
  device::DeviceMemory* memory = device::current();
  if (!memory) return nullptr;
  // Asked once per buffer (cudaPointerGetAttributes: about a microsecond each).
  const bool sendUsed = op.send && extents.send > 0, recvUsed = op.recv && extents.recv > 0;
  const bool sendDev = sendUsed && memory->isDevice(op.send);
  const bool recvDev =
      recvUsed && (sendUsed && op.recv == op.send ? sendDev : memory->isDevice(op.recv));
  // The op's place in the thread's stream (docs/usage.md, "Streams"): after the work queued
  // there so far; with a holding stream, before the work queued there next.
  const bool onGpu = sendDev || recvDev;
  const device::ThreadStream& stream = device::stream();
  std::shared_ptr<device::StreamFence> fence = onGpu ? memory->fence(stream.stream) : nullptr;
  op.fence = fence;  // the stream gate's (stream_gate.h); null: nothing to wait for
  std::shared_ptr<device::StreamHold> held =
      onGpu && stream.holds ? memory->hold(stream.stream) : nullptr;
  std::shared_ptr<OpState> user;
  if (deviceCollectives_ && CollectiveRunner::runs(op.kind)) {
    const char* which = sendUsed && !sendDev   ? "sendbuf"
                        : recvUsed && !recvDev ? "recvbuf"
                                               : nullptr;
    if (which)
      fail(priocclInvalidArgument, kindName(op.kind), ": ", which,
           " is host memory, but PRIOCCL_TRANSPORT=nccl runs collectives on the GPU: pass "
           "device buffers (or choose a host transport, which stages device buffers)");
  } else if (onGpu) {
    std::shared_ptr<DeviceStager> stager;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      requireLive();
      if (!stager_) {
        std::shared_ptr<ProgressGate> gate = engine_->gate();  // outlives the engine
        stager_ = std::make_shared<DeviceStager>(
            *memory, config_.chunkBytes, [gate] { withEngine(*gate, [](Engine& e) { e.poke(); }); },
            [gate] { withEngine(*gate, [](Engine& e) { e.abort(); }); });
      }
      stager = stager_;
    }
    user = stager->stage(op, sendDev ? extents.send : 0, recvDev ? extents.recv : 0, extents.gaps,
                         fence != nullptr);
  }
  // Registered before the op is submitted: nothing else touches its callbacks yet. (An op that
  // never reaches the engine releases the stream when its state goes.)
  if (held)
    (user ? *user : op).callbacks.push_back([held](priocclResult_t, const std::string&) {
      held->release();
    });
  return user;
}

Request CommImpl::pointToPoint(const OpDesc& d) {
  checkPointToPoint(d, rank_, size_);
  const bool sending = d.kind == OpState::Kind::kSend;
  auto state = makeOp(d.send, d.recv, d.count, d.dtype, priocclSum);
  state->kind = d.kind;
  state->peer = d.peer;
  state->tag = d.tag;
  state->priority = d.priority;
  state->errorLog = errors_;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    requireLive();
    if (d.tag < 0 || d.tag >= engine_->pointToPointTags())
      fail(priocclInvalidArgument, sending ? "send" : "recv", ": tag ", d.tag, " is not in 0..",
           engine_->pointToPointTags() - 1);
  }
  const size_t bytes = d.count * reduce::dtypeSize(d.dtype);
  std::shared_ptr<OpState> user = placeBuffers(*state, {sending ? bytes : 0, sending ? 0 : bytes});
  std::lock_guard<std::mutex> lock(mutex_);
  requireLive();
  submitOrDefer(state, false);
  return Request(user ? user : state);
}

void CommImpl::submitOrDefer(const std::shared_ptr<OpState>& state, bool callerWaits) {
  if (!group::active()) {
    handOver(state, callerWaits);
    return;
  }
  group::defer(engine_.get(), state,
               [self = shared_from_this()](std::vector<std::shared_ptr<OpState>>& ops) {
                 std::lock_guard<std::mutex> lock(self->mutex_);
                 self->requireLive();
                 // A waiter drives the engine through its op's gate, a fused member's too
                 // (the engine sets the gate of the ops it is given only).
                 for (auto& op : ops) op->gate = self->engine_->gate();
                 // NCCL's ops read device memory, which fusion's host copies cannot.
                 size_t fusion = self->deviceCollectives_ ? 0 : self->config_.fusionBytes;
                 for (auto& op : fuseAllReduces(std::move(ops), fusion)) self->handOver(op, false);
               });
}

void CommImpl::handOver(const std::shared_ptr<OpState>& op, bool callerWaits) {
  if (streamGate_->admit(op)) {
    enter(op, callerWaits);
    return;
  }
  // Set before the caller can wait on the op (the gate's thread submits it only under mutex_,
  // which this thread holds): a waiter drives the engine through it (driveUntilDone), also
  // while the op still waits in the gate.
  op->gate = engine_->gate();
}

void CommImpl::handOverWaiting(const std::shared_ptr<OpState>& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!streamGate_->take(op)) return;  // failed meanwhile
  try {
    requireLive();
    enter(op, false);
  } catch (const Error& e) {
    op->finish(e.code(), concat(kindName(op->kind), ": ", e.what()));
  }
}

void CommImpl::enter(const std::shared_ptr<OpState>& op, bool callerWaits) {
  op->fence.reset();  // its event goes back to the pool
  // A ragged op's second half is planned now; a plan that fails has failed the op (alike on
  // every rank), which then never enters.
  if (op->prepare && !std::exchange(op->prepare, nullptr)(*op)) return;
  if (op->staging && stager_) stager_->begin(*op);
  engine_->submit(op, callerWaits);
}

std::shared_ptr<OpState> CommImpl::makeOp(const void* send, void* recv, size_t count,
                                          priocclDataType_t dtype, priocclRedOp_t op) {
  auto state = std::make_shared<OpState>();
  state->send = send;
  state->recv = recv;
  state->count = count;
  state->dtype = dtype;
  state->op = op;
  return state;
}

}  // namespace prioccl::detail
