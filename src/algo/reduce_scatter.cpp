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
      elem_(reduce::dtypeSize(spec.dtype)),
      reduced_(static_cast<size_t>(spec.nranks), false),
      sent_(static_cast<size_t>(spec.nranks), false) {
  // One rank: its block is the result (Avg divides by 1). In place, it already is.
  ChunkSpec::Slice own = contribution(0);
  if (p_ == 1 && own.bytes && spec.recv != own.at) std::memcpy(spec.recv, own.at, own.bytes);
}

ReduceScatterChunk::~ReduceScatterChunk() {
  for (ScratchPool::Block& b : partial_) pool_.give(std::move(b));
}

ChunkSpec::Slice ReduceScatterChunk::contribution(int block) const {
  return spec_.slice(spec_.sendBlocks, spec_.send, block, elem_);
}

// Step s: rank r passes the partial sum of block r - s - 1 to r + 1: its own contribution at
// step 0, then what it reduced at step s - 1.
Transfer ReduceScatterChunk::takeSend() {
  int s = sendsPosted_++;
  Transfer t;
  t.peer = mod(r_ + 1);
  t.step = s;
  ChunkSpec::Slice own = contribution(mod(r_ - s - 1));  // a v-variant's blocks differ in length
  t.buf = s == 0 ? own.at : partial_[(s - 1) % 2].get();
  t.bytes = own.bytes;
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
  x.bytes = contribution(mod(r_ - t - 2)).bytes;
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
  ChunkSpec::Slice own = contribution(block);
  reduce::apply(dst, in, own.at, own.bytes / elem_, spec_.dtype, spec_.op, divisor);
  reduced_[static_cast<size_t>(step)] = true;
}

}  // namespace prioccl
