#include "algo/root_tree.h"

#include <algorithm>

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

int RootTree::parent(Shape shape, int rank, int root, int nranks) {
  int v = relative(rank, root, nranks);
  if (v == 0) return -1;
  // Chain: the previous rank. Binomial: v without its highest bit (v joined the tree in the round
  // of that bit, sent by the rank that already held the data).
  int up = shape == Shape::kChain ? v - 1 : v - highestBit(v);
  return absolute(up, root, nranks);
}

std::vector<int> RootTree::children(Shape shape, int rank, int root, int nranks) {
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

int RootTree::place(Shape shape, int rank, int root, int nranks) {
  if (shape == Shape::kChain) return 0;  // one child each
  // v joined in the round of its highest bit; its parent u's children are u + 2^k from u's first
  // round on (bit 1 for the root, else twice u's highest bit), one per round.
  int v = relative(rank, root, nranks), u = v - highestBit(v);
  int bit = u == 0 ? 1 : 2 * highestBit(u), k = 0;
  while (bit < highestBit(v)) {
    bit *= 2;
    ++k;
  }
  return k;
}

RootTree::Shape RootTree::shapeFor(uint64_t chunks, int nranks) {
  uint64_t rounds = 0;
  while ((uint64_t{1} << rounds) < static_cast<uint64_t>(nranks)) ++rounds;
  uint64_t chain = static_cast<uint64_t>(std::max(nranks - 2, 0)) + chunks;
  return rounds * chunks < chain ? Shape::kBinomial : Shape::kChain;
}

}  // namespace prioccl
