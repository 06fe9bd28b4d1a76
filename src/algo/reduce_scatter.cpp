#include "algo/reduce_scatter.h"

#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {

ReduceScatterChunk::ReduceScatterChunk(const ChunkSpec& spec, ScratchPool& pool)
    : spec_(spec),
      pool_(pool),
      p_(spec.nranks),
      r_(spec.rank),
      last_(spec.nranks - 1),
      bytes_(spec.count * reduce::dtypeSize(spec.dtype)),
      reduced_(static_cast<size_t>(spec.nranks), false),
      sent_(static_cast<size_t>(spec.nranks), false) {
  // One rank: its block is the result (Avg divides by 1). In place, it already is.
  if (p_ == 1 && spec.recv != contribution(0)) std::memcpy(spec.recv, contribution(0), bytes_);
}

ReduceScatterChunk::~ReduceScatterChunk() {
  for (ScratchPool::Block& b : partial_) pool_.give(std::move(b));
}

const unsigned char* ReduceScatterChunk::contribution(int block) const {
  size_t elem = reduce::dtypeSize(spec_.dtype);
  return static_cast<const unsigned char*>(spec_.send) +
         static_cast<size_t>(block) * spec_.blockStride * elem;
}

// Step s: rank r passes the partial sum of block r - s - 1 to r + 1: its own contribution at
// step 0, then what it reduced at step s - 1.
Transfer ReduceScatterChunk::takeSend() {
  int s = sendsPosted_++;
  Transfer t;
  t.peer = mod(r_ + 1);
  t.step = s;
  t.buf =
      s == 0 ? const_cast<unsigned char*>(contribution(mod(r_ - 1))) : partial_[(s - 1) % 2].get();
  t.bytes = bytes_;
  return t;
}

// The receive of step t reuses the block that step t - 2's receive filled and step t - 1's send
// read: it waits for that send. So at most two receives are outstanding.
bool ReduceScatterChunk::recvReady() const {
  int t = recvsPosted_;
  return t < last_ && (t < 2 || sent_[static_cast<size_t>(t - 1)]);
}

// ... and receives the partial sum of block r - s - 2 from r - 1.
Transfer ReduceScatterChunk::takeRecv() {
  int t = recvsPosted_++;
  ScratchPool::Block& b = partial_[t % 2];
  if (!b) b = pool_.take();
  Transfer x;
  x.peer = mod(r_ - 1);
  x.step = t;
  x.buf = b.get();
  x.bytes = bytes_;
  return x;
}

void ReduceScatterChunk::sendDone(int step) {
  sent_[static_cast<size_t>(step)] = true;
  ++sendsDone_;
}

// Adds this rank's contribution; the last step's block is this rank's own: the result.
void ReduceScatterChunk::recvDone(int step) {
  ++recvsDone_;
  int block = mod(r_ - step - 2);
  unsigned char* in = partial_[step % 2].get();
  bool last = step == last_ - 1;
  void* dst = last ? spec_.recv : in;
  int divisor = last && spec_.op == priocclAvg ? p_ : 1;
  reduce::apply(dst, in, contribution(block), spec_.count, spec_.dtype, spec_.op, divisor);
  reduced_[static_cast<size_t>(step)] = true;
}

}  // namespace prioccl
