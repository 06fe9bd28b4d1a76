// The one point-to-point interface every transport implements (MPI, UCX). A GPU backend whose
// collectives cannot be preempted needs a different seam (a collective backend), not this one.
//
// Deliberately tiny, in the spirit of Gloo's transport::Pair: post non-blocking sends and receives
// of byte ranges with a 64-bit tag, then poll for completions. The engine makes one call at a time
// (from its progress thread, or from an application thread waiting on an op, under the engine's
// lock), so implementations need no locking of their own. Transports know nothing of priorities.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "prioccl/prioccl.h"

namespace prioccl {

struct Completion {
  uint64_t cookie = 0;  // the caller's value from postSend/postRecv
  size_t bytes = 0;     // a receive's: how many bytes arrived
  bool ok = true;
  priocclResult_t code = priocclSuccess;  // when !ok
  std::string error;                      // when !ok: what went wrong, naming the peer
  // When !ok: the peer's end went away (its endpoint failed or its connection closed), which is
  // no fault of this transfer: the peer died, or failed the communicator itself and tore down
  // after telling why, and the engine gives its reason a moment to arrive (Liveness::endpointLost).
  bool peerLost = false;
};

// Sends in [kEndToEndSendMin, kEndToEndSendMax] bytes complete end to end (see postSend): the
// receiver has matched them. Smaller ones may complete once buffered (control messages, small
// agreements: their bytes do not matter, and an acknowledgement would add a round trip to every
// small op); larger ones go by rendezvous in MPI and UCX, which waits for the receiver already.
constexpr size_t kEndToEndSendMin = 4097, kEndToEndSendMax = 64 << 10;

// How soon a send may complete. kEndToEnd: as above (the scheduler's sends, which its credit
// counts until they complete). kBuffered: once the transport has the bytes, at any size up to
// kEndToEndSendMax; for a send no credit counts (the engine's inline path, a lone small op),
// where the receiver's acknowledgement would only delay the op's end by half a round trip.
// kDelivered: only once the receiver has matched it, at any size: a failing rank's abort notice,
// which must not be lost when that rank closes its endpoints right after (a message still leaving
// a closed endpoint is dropped, and the peer would see the closed endpoint instead of the
// reason). Such a send is not withdrawn by cancelAll(), and quiesce() gives it a moment to finish.
enum class SendCompletion : uint8_t { kEndToEnd, kBuffered, kDelivered };

// Whether a send of `bytes` must complete only once the receiver has matched it (the rules above).
inline bool completesAtReceiver(SendCompletion completion, size_t bytes) {
  return completion == SendCompletion::kDelivered ||
         (completion == SendCompletion::kEndToEnd && bytes >= kEndToEndSendMin &&
          bytes <= kEndToEndSendMax);
}

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;
  // Number of distinct tags the wire can tell apart; the caller keeps live tags unique modulo it.
  virtual uint64_t tagSpace() const = 0;

  // Buffers stay untouched by the caller until the matching completion is polled. A receive
  // accepts up to `bytes` bytes (a longer message completes it with an error); the completion
  // says how many arrived, and the caller checks that it is what it expected.
  // The engine's credit counts a send as in flight until its completion, so a send of more than a
  // few KiB should complete only once its bytes have left this host (the receiver has them, or
  // the wire is about to take them), not when a library or kernel buffer has swallowed them:
  // bytes queued below the scheduler cannot be overtaken by a more urgent chunk.
  // A message that arrives before its receive is posted must not hold back later messages from the
  // same peer (MPI and UCX keep it aside as unexpected): ranks activate chunks in different orders.
  virtual void postSend(int peer, uint64_t tag, const void* buf, size_t bytes, uint64_t cookie,
                        SendCompletion completion) = 0;
  virtual void postRecv(int peer, uint64_t tag, void* buf, size_t bytes, uint64_t cookie) = 0;

  // Makes progress and appends finished operations to `out`; returns how many were appended.
  virtual size_t poll(std::vector<Completion>& out) = 0;
  // What poll() calls underneath, for the error when it does not return (a string literal).
  virtual const char* pollCall() const { return "poll"; }
  // True when poll() gives the CPU away by itself when it finds nothing (Open MPI does when
  // cores are oversubscribed: mpi_yield_when_idle): the engine's spin then yields only now and
  // then, and after every empty poll otherwise (core/handover.h, Backoff).
  virtual bool pollYields() const { return false; }
  // Operations posted and not yet reported by poll().
  virtual size_t pending() const = 0;
  // Withdraws every transfer posted so far, sends included (used when the communicator fails):
  // poll() never reports any of them, nor one that finished and was not reported yet, because
  // the caller forgets their cookies. Best effort as to the wire: a withdrawn transfer may still
  // touch its buffer (a receive already matched goes on filling it) until quiesce() returns true.
  virtual void cancelAll() = 0;
  // Stops all traffic for good (the communicator's end): true when no transfer ever posted can
  // touch its buffer any more, so the caller may free them; false when the transport cannot
  // promise that (the caller then keeps the buffers it owns).
  virtual bool quiesce() { return false; }

  // Optional, so that a waiting engine can sleep instead of napping: a descriptor that becomes
  // readable when poll() may have something new (-1: none, the engine naps).
  virtual int eventFd() const { return -1; }
  // Called right before sleeping on eventFd(); false when something is already waiting, so
  // the caller polls instead of sleeping.
  virtual bool armEvents() { return false; }
};

}  // namespace prioccl
