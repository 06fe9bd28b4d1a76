// The collective backend seam, beside the point-to-point transport (transport.h): a chunk is one
// opaque collective of a library that runs whole collectives (MPI's non-blocking collectives;
// NCCL). Such a collective cannot be preempted once launched, and every rank must launch the same
// collectives in the same order (MPI's rule for collectives on one communicator; NCCL's for
// kernels on one communicator). Priorities therefore act between launches, in an order every
// rank agrees on (core/collective_runner.h); the backend knows nothing of priorities or of that
// order.
//
// As with Transport, the engine makes one call at a time (progress thread or a waiter holding the
// engine's lock); implementations need no locking of their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "prioccl/prioccl.h"
#include "transport.h"  // Completion

namespace prioccl {

// What one launch does. Values are OpState::Kind's (core/op.h checks them).
enum class CollKind : uint8_t {
  kAllReduce = 0,
  kBroadcast = 3,
  kReduce = 4,
  kAllGather = 5,
  kReduceScatter = 6,
  kAllToAll = 7,
  kBarrier = 8
};

// One collective over `count` elements (per rank for the blocked kinds: an all-gather's send,
// a reduce-scatter's receive, an all-to-all's block), of `dtype`, reducing with `op` (the kinds
// that reduce), from or to `root` (broadcast, reduce). Buffers as NCCL's; the root's own buffers
// for a rooted kind, null where a rank neither reads nor writes. `stride`: for the blocked kinds,
// the elements from one rank's block to the next in the blocked buffer (the op's full per-rank
// count when this launch is a slice of it; equal to count otherwise).
struct CollLaunch {
  CollKind kind = CollKind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  size_t stride = 0;
  priocclDataType_t dtype = priocclFloat32;
  priocclRedOp_t op = priocclSum;
  int root = -1;
};

class CollBackend {
 public:
  virtual ~CollBackend() = default;
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Starts one collective; its completion carries `cookie`. The buffers stay untouched by the
  // caller until then. Throws prioccl errors for what the backend cannot do (naming it).
  virtual void launch(const CollLaunch& c, uint64_t cookie) = 0;
  // Makes progress and appends finished launches to `out`; returns how many were appended.
  virtual size_t poll(std::vector<Completion>& out) = 0;
  virtual size_t pending() const = 0;  // launched and not yet reported
  // Whether a reduce-scatter may read sendbuf while writing recvbuf inside it (NCCL's in-place
  // layout). False: the caller passes such a launch a copy of its input (MPI forbids aliasing).
  virtual bool inPlaceReduceScatter() const { return false; }
  // Whether launches take device (GPU) buffers, and only those (NCCL); false: host buffers.
  virtual bool deviceBuffers() const { return false; }
  // The communicator failed: stop waiting for the collectives in flight (best effort; a library
  // that cannot cancel a collective leaves it, and its resources, behind).
  virtual void abandon() = 0;
};

}  // namespace prioccl
