#include "algo/broadcast.h"

#include <algorithm>
#include <cstring>

#include "reduce/reduce.h"

namespace prioccl {
namespace {

// Ranks relative to the root: the root is 0.
int relative(int rank, int root, int nranks) {
  return (rank - root + nranks) % nranks;
}
int absolute(int v, int root, int nranks) {
  return (v + root) % nranks;
}

int highestBit(int v) {
  int bit = 1;
  while (bit * 2 <= v) bit *= 2;
  return bit;
}

}  // namespace

int BroadcastChunk::parent(Shape shape, int rank, int root, int nranks) {
  int v = relative(rank, root, nranks);
  if (v == 0) return -1;
  // Chain: the previous rank. Binomial: v without its highest bit (v joined the tree in the round
  // of that bit, sent by the rank that already held the data).
  int up = shape == Shape::kChain ? v - 1 : v - highestBit(v);
  return absolute(up, root, nranks);
}

std::vector<int> BroadcastChunk::children(Shape shape, int rank, int root, int nranks) {
  int v = relative(rank, root, nranks);
  std::vector<int> out;
  if (shape == Shape::kChain) {
    if (v + 1 < nranks) out.push_back(absolute(v + 1, root, nranks));
    return out;
  }
  // v's children are v + 2^k for every 2^k above v's highest bit (every 2^k for the root), in
  // ascending order: one per round, and the first child has the largest subtree (the root's first
  // child, 1, serves every odd rank), so it starts forwarding soonest.
  for (int bit = v == 0 ? 1 : 2 * highestBit(v); v + bit < nranks; bit *= 2)
    out.push_back(absolute(v + bit, root, nranks));
  return out;
}

BroadcastChunk::Shape BroadcastChunk::shapeFor(uint64_t chunks, int nranks) {
  uint64_t rounds = 0;
  while ((uint64_t{1} << rounds) < static_cast<uint64_t>(nranks)) ++rounds;
  uint64_t chain = static_cast<uint64_t>(std::max(nranks - 2, 0)) + chunks;
  return rounds * chunks < chain ? Shape::kBinomial : Shape::kChain;
}

BroadcastChunk::BroadcastChunk(const ChunkSpec& spec, int root, Shape shape)
    : data_(spec.recv),
      bytes_(spec.count * reduce::dtypeSize(spec.dtype)),
      parent_(parent(shape, spec.rank, root, spec.nranks)),
      children_(children(shape, spec.rank, root, spec.nranks)),
      have_(spec.rank == root) {
  if (have_ && spec.send != spec.recv) std::memcpy(spec.recv, spec.send, bytes_);
}

Transfer BroadcastChunk::takeSend() {
  Transfer t;
  t.peer = children_[next_++];
  t.step = 0;
  t.buf = data_;
  t.bytes = bytes_;
  return t;
}

Transfer BroadcastChunk::takeRecv() {
  recvPosted_ = true;
  Transfer t;
  t.peer = parent_;
  t.step = 0;
  t.buf = data_;
  t.bytes = bytes_;
  t.exact = true;  // every rank cuts the op alike only when all agree on its size
  return t;
}

}  // namespace prioccl
