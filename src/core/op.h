// One submitted op (a collective or a point-to-point send or receive): its arguments (immutable
// after submit) and its completion state, shared by the engine and every Request handle on it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "prioccl/prioccl.hpp"

namespace prioccl::detail {

// Process-wide order of recorded failures, so the newest of several records can be picked.
uint64_t nextErrorSerial();

// Last failure seen by a communicator, readable from any thread.
class ErrorLog {
 public:
  void set(const std::string& message) {
    std::lock_guard<std::mutex> lock(mutex_);
    last_ = message;
    serial_ = nextErrorSerial();
  }
  std::string get(uint64_t* serial = nullptr) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (serial) *serial = serial_;
    return last_;
  }

 private:
  mutable std::mutex mutex_;
  std::string last_;
  uint64_t serial_ = 0;
};

struct ProgressGate;
}  // namespace prioccl::detail
namespace prioccl::device {
class StreamFence;  // device/device_memory.h
}  // namespace prioccl::device
namespace prioccl::detail {

// An op whose device buffers run on host copies (api/device_stager.h): its input arrives in the
// host copy in order while the op may already run, and finished parts of its result may go back
// early. Both calls come from the progress thread and never block.
class Staging {
 public:
  virtual ~Staging() = default;
  // Whether the first `bytes` of the op's input are in the host copy (SIZE_MAX: all of it). The
  // input is the send buffer; for the kinds whose buffers are one block in place, that block.
  virtual bool inputReady(size_t bytes) const = 0;
  // Bytes [offset, offset + bytes) of the receive buffer hold their final result.
  virtual void resultDone(size_t offset, size_t bytes) = 0;
};

struct OpState : std::enable_shared_from_this<OpState> {
  // A collective (all-reduce; broadcast from or reduce to `root`; all-gather, reduce-scatter,
  // all-to-all; a barrier: count 0, matched and checked like the others, no data), or
  // a point-to-point send to / receive from `peer` with the user's `tag`. The values travel in
  // Announce::kind: never renumber them.
  enum class Kind : uint8_t {
    kAllReduce = 0,
    kSend = 1,
    kRecv = 2,
    kBroadcast = 3,
    kReduce = 4,
    kAllGather = 5,
    kReduceScatter = 6,
    kAllToAll = 7,
    kBarrier = 8,
    // The v-variants: per-rank counts and displacements (the vectors below).
    kAllGatherV = 9,
    kReduceScatterV = 10,
    kAllToAllV = 11,
    // priocclJoin: count 0, matched (by the coordinator only) once every rank has joined; `root`
    // then holds the last rank to join. Until then the coordinator answers other ranks' named
    // ops for this rank, which runs stand-ins for them (engine.cpp).
    kJoin = 12
  };
  static constexpr int kKinds = 13;
  Kind kind = Kind::kAllReduce;
  // The step machine a kind runs on: a v-variant's is its plain kind's, with the layout below.
  Kind baseKind() const {
    switch (kind) {
      case Kind::kAllGatherV:
        return Kind::kAllGather;
      case Kind::kReduceScatterV:
        return Kind::kReduceScatter;
      case Kind::kAllToAllV:
        return Kind::kAllToAll;
      default:
        return kind;
    }
  }
  // Whether the op's buffers hold one block per rank.
  bool blocked() const {
    Kind b = baseKind();
    return b == Kind::kAllGather || b == Kind::kReduceScatter || b == Kind::kAllToAll;
  }
  int peer = -1;
  int tag = 0;
  int root = -1;  // broadcast: the rank whose data every rank receives; reduce: the one receiving
  bool pointToPoint() const { return kind == Kind::kSend || kind == Kind::kRecv; }
  const void* send = nullptr;
  void* recv = nullptr;
  // All-gather: each rank's (sendcount); reduce-scatter: each result's (recvcount); all-to-all:
  // each block's; the v-variants: the largest block of any rank (an all-to-all-v's is the
  // group's, known once the op is matched), which the op's chunks are cut by.
  size_t count = 0;
  // The v-variants' blocks, in elements (empty for the others: blocks of `count`, packed). The
  // send side: a reduce-scatter-v's (packed) and an all-to-all-v's send buffer; the receive side:
  // an all-gather-v's and an all-to-all-v's receive buffer, and a reduce-scatter-v's counts.
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
  // What this rank announces of them (Announce's fields of the same names, wire.h).
  uint64_t layout = 0, pairDigest = 0, pairCount = 0, pairWhere = 0;
  priocclDataType_t dtype = priocclFloat32;
  priocclRedOp_t op = priocclSum;
  int priority = 0;
  bool named = false;
  // Auto: the communicator's choice by size, which the engine writes here when it takes the op.
  priocclAlgorithm_t algorithm = priocclAlgoAuto;
  std::string key;  // named ops: matched across ranks by (key, occurrence)
  std::shared_ptr<ErrorLog> errorLog;
  std::shared_ptr<ProgressGate> gate;
  // The buffer of an op that owns its data (send and recv point into it): a joined rank's
  // stand-in for an op it never submitted (core/stand_in.h), a group's fused op (api/fusion.h).
  std::vector<unsigned char> ownBuffer;
  // Set when the op's buffers are host copies of device buffers (null: the user's own buffers).
  std::shared_ptr<Staging> staging;
  // Set when the op's buffers are device memory and the user's stream still had work queued
  // before the op at submission: the op enters the engine once that is done (api/stream_gate.h).
  std::shared_ptr<device::StreamFence> fence;
  // Set when the op's arguments come from another op's result (a ragged op, api/ragged.h): it
  // enters the engine once `after` has finished and `prepare` has filled them in. prepare returns
  // false when it has failed the op instead (it then never enters).
  std::shared_ptr<OpState> after;
  std::function<bool(OpState&)> prepare;
  // Whether an op cut into chunks of elements reads and writes only its chunk's elements of
  // send and recv (so a staged op's chunks may start and end one by one).
  bool sliced() const {
    return kind == Kind::kAllReduce || kind == Kind::kBroadcast || kind == Kind::kReduce ||
           kind == Kind::kSend || kind == Kind::kRecv;
  }

  // Progress thread only.
  std::chrono::steady_clock::time_point submitted;
  uint64_t globalSeq = 0;   // order of the coordinator's decision: the same on every rank
  uint64_t occurrence = 0;  // named: among ops with its key; unnamed: in submission order
  // Last data completion of one of its chunks (timeouts count from it, or from submission).
  std::chrono::steady_clock::time_point lastProgress;
  bool stallWarned = false;
  bool inlined = false;  // runs on the inline path (set before the caller drives it)
  bool ended = false;    // the engine is done with it; finish() may still be pending

  // Completion: written once by finish(), then read by anyone.
  std::atomic<bool> done{false};
  std::mutex mutex;
  std::condition_variable cv;
  priocclResult_t result = priocclInProgress;
  std::string error;
  std::vector<Request::Callback> callbacks;

  // Runs the callbacks outside the lock, then wakes the waiters.
  void finish(priocclResult_t code, const std::string& message);
};

// The kinds as Announce::kind carries them (wire.h), for code that reads announcements.
inline constexpr auto kAllReduceKind = static_cast<int32_t>(OpState::Kind::kAllReduce);
inline constexpr auto kBroadcastKind = static_cast<int32_t>(OpState::Kind::kBroadcast);
inline constexpr auto kReduceKind = static_cast<int32_t>(OpState::Kind::kReduce);
inline constexpr auto kAllGatherKind = static_cast<int32_t>(OpState::Kind::kAllGather);
inline constexpr auto kReduceScatterKind = static_cast<int32_t>(OpState::Kind::kReduceScatter);
inline constexpr auto kAllToAllKind = static_cast<int32_t>(OpState::Kind::kAllToAll);
inline constexpr auto kBarrierKind = static_cast<int32_t>(OpState::Kind::kBarrier);
inline constexpr auto kAllGatherVKind = static_cast<int32_t>(OpState::Kind::kAllGatherV);
inline constexpr auto kReduceScatterVKind = static_cast<int32_t>(OpState::Kind::kReduceScatterV);

// "allreduce", "broadcast", "send", "recv", ...
inline const char* kindName(OpState::Kind kind) {
  switch (kind) {
    case OpState::Kind::kAllReduce:
      return "allreduce";
    case OpState::Kind::kBroadcast:
      return "broadcast";
    case OpState::Kind::kReduce:
      return "reduce";
    case OpState::Kind::kAllGather:
      return "allgather";
    case OpState::Kind::kReduceScatter:
      return "reducescatter";
    case OpState::Kind::kAllToAll:
      return "alltoall";
    case OpState::Kind::kBarrier:
      return "barrier";
    case OpState::Kind::kAllGatherV:
      return "allgatherv";
    case OpState::Kind::kReduceScatterV:
      return "reducescatterv";
    case OpState::Kind::kAllToAllV:
      return "alltoallv";
    case OpState::Kind::kJoin:
      return "join";
    case OpState::Kind::kSend:
      return "send";
    case OpState::Kind::kRecv:
      return "recv";
  }
  return "op";
}

}  // namespace prioccl::detail
