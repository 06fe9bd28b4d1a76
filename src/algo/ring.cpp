// Ring all-reduce step machine. Segment k of the chunk is reduced in the fixed ring order that
// starts at rank k and is then broadcast unchanged, so every rank ends with identical bits.
#include "algo/ring.h"

#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {

RingChunk::RingChunk(const ChunkSpec& spec, ScratchPool& pool)
    : spec_(spec),
      pool_(pool),
      p_(spec.nranks),
      r_(spec.rank),
      nsteps_(steps(spec.nranks)),
      elem_(reduce::dtypeSize(spec.dtype)),
      sendDone_(static_cast<size_t>(nsteps_), 0) {
  // One rank: the reduction of a single contribution is the contribution (Avg divides by 1).
  if (p_ == 1 && !inPlace()) std::memcpy(spec_.recv, spec_.send, spec_.count * elem_);
}

RingChunk::~RingChunk() {
  pool_.give(std::move(scratch_));
}

size_t RingChunk::segCount(int seg) const {
  return ringSegment(spec_.count, p_, seg).count;
}

// Byte offset of segment `seg`.
size_t RingChunk::segOffset(int seg) const {
  return ringSegment(spec_.count, p_, seg).first * elem_;
}

unsigned char* RingChunk::recvSeg(int seg) const {
  return static_cast<unsigned char*>(spec_.recv) + segOffset(seg);
}

const unsigned char* RingChunk::sendSeg(int seg) const {
  return static_cast<const unsigned char*>(spec_.send) + segOffset(seg);
}

// Send of step s carries data produced by the receive of step s-1.
bool RingChunk::sendReady() const {
  return sendsPosted_ < nsteps_ && sendsPosted_ <= recvsDone_;
}

Transfer RingChunk::takeSend() {
  int s = sendsPosted_++;
  Transfer t;
  t.peer = mod(r_ + 1);
  t.step = s;
  if (s < p_ - 1) {  // reduce-scatter: pass on our partial sum of segment r-s
    int seg = mod(r_ - s);
    t.buf = const_cast<unsigned char*>(s == 0 ? sendSeg(seg) : recvSeg(seg));
    t.bytes = segCount(seg) * elem_;
  } else {  // all-gather: pass on the final segment we received last
    int seg = mod(r_ + 1 - (s - (p_ - 1)));
    t.buf = recvSeg(seg);
    t.bytes = segCount(seg) * elem_;
  }
  return t;
}

// One receive outstanding at a time (the scratch is reused). An all-gather receive overwrites a
// segment an earlier reduce-scatter send of the same index read, so that send must be done first.
bool RingChunk::recvReady() const {
  if (recvsPosted_ >= nsteps_ || recvsPosted_ > recvsDone_) return false;
  int t = recvsPosted_;
  return t < p_ - 1 || sendsDonePrefix_ > t - (p_ - 1);
}

Transfer RingChunk::takeRecv() {
  int t = recvsPosted_++;
  Transfer x;
  x.peer = mod(r_ - 1);
  x.step = t;
  if (t < p_ - 1) {
    int seg = mod(r_ - t - 1);
    x.bytes = segCount(seg) * elem_;
    if (inPlace()) {
      if (!scratch_) scratch_ = pool_.take();
      x.buf = scratch_.get();
    } else {
      x.buf = recvSeg(seg);  // out of place: the user's send buffer still holds our own part
    }
  } else {
    int seg = mod(r_ - (t - (p_ - 1)));
    x.buf = recvSeg(seg);
    x.bytes = segCount(seg) * elem_;
  }
  return x;
}

void RingChunk::sendDone(int step) {
  sendDone_[step] = 1;
  while (sendsDonePrefix_ < nsteps_ && sendDone_[sendsDonePrefix_]) ++sendsDonePrefix_;
}

void RingChunk::recvDone(int step) {
  ++recvsDone_;
  if (step >= p_ - 1) return;  // all-gather data landed in place
  int seg = mod(r_ - step - 1);
  unsigned char* dst = recvSeg(seg);
  const void* incoming = inPlace() ? static_cast<const void*>(scratch_.get()) : dst;
  const void* local = inPlace() ? static_cast<const void*>(dst) : sendSeg(seg);
  bool last = step == p_ - 2;
  int divisor = (last && spec_.op == priocclAvg) ? p_ : 1;
  reduce::apply(dst, incoming, local, segCount(seg), spec_.dtype, spec_.op, divisor);
  if (last) pool_.give(std::move(scratch_));
}

bool RingChunk::finished() const {
  return recvsDone_ == nsteps_ && sendsDonePrefix_ == nsteps_;
}

}  // namespace prioccl
