// The trees of the rooted collectives (broadcast, reduce): data flows down a tree from the root
// (broadcast) or up it to the root (reduce). Two shapes:
// - a chain in rank order from the root: each link carries the data once, so consecutive chunks
//   pipeline along it at link speed (large ops);
// - a binomial tree: ceil(log2 p) hops, the largest subtree first (small ops).
#pragma once

#include <cstdint>
#include <vector>

namespace prioccl {

struct RootTree {
  enum class Shape { kChain, kBinomial };

  // The shape around `rank`: its parent (-1 for the root) and its children, in the order a
  // broadcast serves them (the first has the largest subtree).
  static int parent(Shape shape, int rank, int root, int nranks);
  static std::vector<int> children(Shape shape, int rank, int root, int nranks);
  // The place of `rank` (not the root) among its parent's children: children(parent)[place] ==
  // rank, computed without building that list.
  static int place(Shape shape, int rank, int root, int nranks);

  // The shape for an op cut into `chunks` chunks, from arguments every rank agrees on. Counted in
  // chunk transfers on the critical path: along the chain the last rank is reached after
  // p - 2 + chunks of them (the pipeline fills, then one per chunk); the binomial root sends (or
  // receives) every chunk ceil(log2 p) times. The chain wins from a few chunks up, the tree for a
  // lone small chunk.
  static Shape shapeFor(uint64_t chunks, int nranks);
  static const char* name(Shape shape) { return shape == Shape::kChain ? "chain" : "binomial"; }
};

}  // namespace prioccl
