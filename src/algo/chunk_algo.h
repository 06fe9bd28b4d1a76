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

struct HostLayout;

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

// Where each rank's block lies in a buffer that holds one per rank (an all-gather's receive
// buffer, a reduce-scatter's send buffer, both of an all-to-all's), in elements from the buffer's
// start: block b holds counts[b] elements from displs[b] on. The plain collectives leave the
// arrays null: every block then holds `count` elements, block b from b * count on.
struct BlockLayout {
  const size_t* counts = nullptr;
  const size_t* displs = nullptr;
  size_t count = 0;
  size_t countOf(int b) const { return counts ? counts[b] : count; }
  size_t displOf(int b) const { return displs ? displs[b] : static_cast<size_t>(b) * count; }
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
  // The blocked collectives: the chunk covers elements [first, first + count) of every block of
  // these layouts, so send and recv point `first` elements past their buffers' starts. A block
  // shorter than that (the v-variants) has a shorter slice, or none (slice()).
  size_t first = 0;
  BlockLayout sendBlocks, recvBlocks;
  // Which ranks share a host (the hierarchical all-reduce's two levels); null: every rank its
  // own host. Outlives the chunk.
  const HostLayout* hosts = nullptr;

  // This chunk's slice of block b of `layout` in the buffer whose chunk pointer is `base`: where
  // it starts, and its length in bytes (0 past the block's end).
  struct Slice {
    unsigned char* at;
    size_t bytes;
  };
  Slice slice(const BlockLayout& layout, const void* base, int b, size_t elemBytes) const {
    size_t n = layout.countOf(b);
    n = n > first ? (n - first < count ? n - first : count) : 0;
    auto* at = const_cast<unsigned char*>(static_cast<const unsigned char*>(base));
    // An empty slice is not offset: a rank with nothing to send may pass a null buffer.
    return {n ? at + layout.displOf(b) * elemBytes : at, n * elemBytes};
  }
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
