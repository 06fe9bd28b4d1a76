// Double binary tree step machine. Each node folds its children into its own contribution in
// child-slot order whatever order they arrive in, and the root's result is broadcast unchanged,
// so every rank ends with identical bits, the same on every run.
#include "algo/tree.h"

#include <cassert>
#include <cstring>
#include <utility>

#include "reduce/reduce.h"

namespace prioccl {

namespace {

// In-order binary tree over positions 0..n-1, as NCCL's ncclGetBtree but without its one-child
// root: position x has label q = x + 1 in 1..n, and the lowest set bit b of q is its height
// (odd labels, i.e. even positions, are the leaves). Children are q - b/2 and q + b/2, the right
// one lowered to q + b/4, q + b/8, ... while past n. The parent is whichever of q - b, q + b has
// lowest bit 2b, or q - b when that one is past n. The root is the largest power of two <= n.
TreeLinks btree(int n, int x) {
  TreeLinks l;
  const unsigned un = static_cast<unsigned>(n);
  const unsigned q = static_cast<unsigned>(x) + 1;
  const unsigned b = q & (~q + 1);
  unsigned up = (q ^ b) | (b << 1);
  if (up > un) up = q ^ b;
  if (up != 0) {
    l.parent = static_cast<int>(up) - 1;
    l.slot = q < up ? 0 : 1;
  }
  unsigned h = b >> 1;
  if (h != 0) {
    l.child[0] = static_cast<int>(q - h) - 1;
    while (h != 0 && q + h > un) h >>= 1;
    if (h != 0) l.child[1] = static_cast<int>(q + h) - 1;
  }
  return l;
}

}  // namespace

// Tree 0 has the odd ranks interior. Tree 1 puts position x on rank x + 1 (mod n): its interior
// positions are odd, so its interior ranks are even (including 0 when n is even, since position
// n - 1 is odd then) and no rank is interior in both.
TreeLinks treeLinks(int nranks, int rank, int tree) {
  if (tree == 0) return btree(nranks, rank);
  TreeLinks l = btree(nranks, (rank + nranks - 1) % nranks);
  auto shift = [nranks](int x) { return x < 0 ? -1 : (x + 1) % nranks; };
  l.parent = shift(l.parent);
  l.child[0] = shift(l.child[0]);
  l.child[1] = shift(l.child[1]);
  return l;
}

TreeChunk::TreeChunk(const ChunkSpec& spec, ScratchPool& pool)
    : spec_(spec), pool_(pool), p_(spec.nranks), elem_(reduce::dtypeSize(spec.dtype)) {
  // One rank: the reduction of a single contribution is the contribution (Avg divides by 1).
  if (p_ == 1) {
    if (!inPlace()) std::memcpy(spec_.recv, spec_.send, spec_.count * elem_);
    return;
  }
  half_[0].count = (spec_.count + 1) / 2;
  half_[1].count = spec_.count / 2;
  half_[1].offset = half_[0].count * elem_;
  for (int t = 0; t < 2; ++t) {
    Half& h = half_[t];
    if (h.count == 0) continue;  // a one-element chunk: tree 1 carries nothing
    h.links = treeLinks(p_, spec_.rank, t);
    h.children = (h.links.child[0] >= 0) + (h.links.child[1] >= 0);
    const size_t bytes = h.count * elem_;
    sendsTotal_ += (h.links.parent >= 0) + h.children;
    recvsTotal_ += h.children + (h.links.parent >= 0);
    for (int c = 0; c < h.children; ++c) {
      h.in[c] = pool_.take();
      queueRecv(h.links.child[c], 3 * t + c, h.in[c].get(), bytes);
    }
    if (h.children > 0) continue;
    // A leaf (never the root: p > 1 and the tree spans every rank) sends its own data at once.
    queueSend(h.links.parent, 3 * t + h.links.slot, sendHalf(h), bytes);
    // Out of place that send reads the user's send buffer, so the final value may land already.
    if (!inPlace()) queueRecv(h.links.parent, 3 * t + 2, recvHalf(h), bytes);
    h.downRecvQueued = !inPlace();
  }
}

TreeChunk::~TreeChunk() {
  for (Half& h : half_)
    for (ScratchPool::Block& b : h.in) pool_.give(std::move(b));
}

void TreeChunk::queueSend(int peer, int step, const void* buf, size_t bytes) {
  assert(sendsQueued_ < kMaxQueued);
  sendQ_[sendsQueued_++] = {peer, step, const_cast<void*>(buf), bytes};
}

void TreeChunk::queueRecv(int peer, int step, void* buf, size_t bytes) {
  assert(recvsQueued_ < kMaxQueued);
  recvQ_[recvsQueued_++] = {peer, step, buf, bytes};
}

void TreeChunk::sendDown(int t) {
  Half& h = half_[t];
  for (int c = 0; c < h.children; ++c)
    queueSend(h.links.child[c], 3 * t + 2, recvHalf(h), h.count * elem_);
}

// Folds the children that have arrived into the accumulator (the recv half), strictly in slot
// order: acc = op(child 0, own), then acc = op(child 1, acc). A child 1 that arrives first waits
// in its scratch. After the last child the root has the final value (Avg divides there, once);
// any other node sends its partial up.
void TreeChunk::reduceArrived(int t) {
  Half& h = half_[t];
  while (h.reduced < h.children && h.arrived[h.reduced]) {
    const int c = h.reduced++;
    const bool last = h.reduced == h.children;
    const bool root = h.links.parent < 0;
    const int divisor = (last && root && spec_.op == priocclAvg) ? p_ : 1;
    unsigned char* acc = recvHalf(h);
    const void* local = c == 0 ? static_cast<const void*>(sendHalf(h)) : acc;
    reduce::apply(acc, h.in[c].get(), local, h.count, spec_.dtype, spec_.op, divisor);
    pool_.give(std::move(h.in[c]));
  }
  if (h.reduced < h.children) return;
  if (h.links.parent < 0)
    sendDown(t);
  else
    queueSend(h.links.parent, 3 * t + h.links.slot, recvHalf(h), h.count * elem_);
}

// An up send done frees the recv half it read (interior nodes, and leaves in place), so the final
// value may now be received into it.
void TreeChunk::sendDone(int step) {
  ++sendsDone_;
  const int t = step / 3;
  Half& h = half_[t];
  if (step % 3 == 2 || h.downRecvQueued) return;
  h.downRecvQueued = true;
  queueRecv(h.links.parent, 3 * t + 2, recvHalf(h), h.count * elem_);
}

void TreeChunk::recvDone(int step) {
  ++recvsDone_;
  const int t = step / 3, k = step % 3;
  if (k == 2) {
    sendDown(t);  // the final value landed in the recv half: pass it on unchanged
    return;
  }
  half_[t].arrived[k] = true;
  reduceArrived(t);
}

}  // namespace prioccl
