// The step-machine interface every per-chunk algorithm implements (ring, tree, recursive doubling,
// halving-doubling, broadcast, reduce, all-gather, reduce-scatter, point to point).
//
// The engine drives a chunk purely through these calls: it asks what may be posted, posts it on
// the transport when the scheduler allows, and reports completions back. A chunk never touches the
// transport, so pausing it is simply not asking for its next send; it keeps its partial sums.
#pragma once

#include <cstddef>
#include <cstdint>

#include "prioccl/prioccl.h"

namespace prioccl {

// One point-to-point transfer a chunk wants posted. `step` is unique within the chunk and is the
// same number on sender and receiver, so (chunk identity, step) is the wire tag.
struct Transfer {
  int peer = -1;
  int step = 0;
  void* buf = nullptr;
  size_t bytes = 0;
  // A receive: false accepts a shorter message (its length comes through recvLength); true
  // fails the communicator unless exactly `bytes` arrive.
  bool exact = true;
};

// Everything a chunk needs to know about its slice of an op.
struct ChunkSpec {
  const void* send = nullptr;  // this chunk's first element in the user's send buffer
  void* recv = nullptr;        // ... and in the receive buffer (may equal send)
  size_t count = 0;            // elements in the chunk (> 0)
  priocclDataType_t dtype = priocclFloat32;
  priocclRedOp_t op = priocclSum;
  int rank = 0;
  int nranks = 1;
  // All-gather and reduce-scatter: the buffer with one block per rank (all-gather: recv;
  // reduce-scatter: send) points at this chunk's slice of rank 0's block, and rank b's slice is
  // b * blockStride elements further on.
  size_t blockStride = 0;
};

class ChunkAlgo {
 public:
  virtual ~ChunkAlgo() = default;
  virtual bool sendReady() const = 0;
  virtual Transfer takeSend() = 0;  // precondition: sendReady()
  virtual bool recvReady() const = 0;
  virtual Transfer takeRecv() = 0;  // precondition: recvReady()
  virtual void sendDone(int step) = 0;
  virtual void recvDone(int step) = 0;  // reduces or copies the received data
  // For receives posted with exact == false: the bytes that arrived, just before recvDone.
  virtual void recvLength(int /*step*/, size_t /*bytes*/) {}
  virtual bool finished() const = 0;
};

}  // namespace prioccl
