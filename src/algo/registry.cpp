#include "algo/registry.h"

#include <strings.h>

#include "algo/halving_doubling.h"
#include "algo/hierarchical.h"
#include "algo/recursive_doubling.h"
#include "algo/ring.h"
#include "algo/tree.h"
#include "common/error.h"

namespace prioccl {
namespace {

// log2 of the largest power of two <= nranks, and whether ranks beyond it exist (each such rank
// is absorbed by a neighbour, which also sends the result back: one more send of the op).
struct PowerOfTwo {
  int rounds = 0;
  int p2 = 1;
  double beyond = 0;
  explicit PowerOfTwo(int nranks) {
    while (p2 * 2 <= nranks) {
      p2 *= 2;
      ++rounds;
    }
    beyond = nranks > p2 ? 1 : 0;
  }
};

double ringSends(int nranks) {
  return nranks <= 1 ? 0 : 2.0 * (nranks - 1) / nranks;
}

// Interior in one tree: a chunk up and a chunk down (tree.h); below 4 ranks it moves as a ring.
double treeSends(int nranks) {
  return nranks >= 4 ? 2 : ringSends(nranks);
}

double recursiveDoublingSends(int nranks) {
  if (nranks <= 1) return 0;
  PowerOfTwo t(nranks);
  return t.rounds + t.beyond;
}

double halvingDoublingSends(int nranks) {
  if (nranks <= 1) return 0;
  PowerOfTwo t(nranks);
  return 2.0 * (t.p2 - 1) / t.p2 + t.beyond;
}

template <typename Chunk>
std::unique_ptr<ChunkAlgo> make(const ChunkSpec& spec, ScratchPool& scratch) {
  return std::make_unique<Chunk>(spec, scratch);
}

}  // namespace

// AlgoEntry's cut and flag, by name.
constexpr AlgoEntry::Cut kWholeChunks = AlgoEntry::Cut::kWholeChunks,
                         kCutFiner = AlgoEntry::Cut::kFiner,
                         kCutFinerKeepingSteps = AlgoEntry::Cut::kFinerKeepingSteps;
constexpr bool kCarried = true, kNotCarried = false;

// clang-format off
const std::vector<AlgoEntry>& algoRegistry() {
  static const std::vector<AlgoEntry> rows = {
    {priocclAlgoRing, "ring", "", RingChunk::steps, RingChunk::scratchBytes, ringSends,
     kCutFinerKeepingSteps, kNotCarried, make<RingChunk>},
    {priocclAlgoTree, "tree", "", TreeChunk::steps, TreeChunk::scratchBytes, treeSends,
     kCutFiner, kNotCarried, make<TreeChunk>},
    {priocclAlgoRecursiveDoubling, "rd", "recursive_doubling", RecursiveDoublingChunk::steps,
     RecursiveDoublingChunk::scratchBytes, recursiveDoublingSends,
     kWholeChunks, kCarried, make<RecursiveDoublingChunk>},
    {priocclAlgoHalvingDoubling, "hd", "halving_doubling", HalvingDoublingChunk::steps,
     HalvingDoublingChunk::scratchBytes, halvingDoublingSends,
     kWholeChunks, kCarried, make<HalvingDoublingChunk>},
    {priocclAlgoHierarchical, "hier", "hierarchical", HierarchicalChunk::steps,
     HierarchicalChunk::scratchBytes, ringSends, kCutFinerKeepingSteps, kNotCarried,
     make<HierarchicalChunk>},
  };
  return rows;
}
// clang-format on

const AlgoEntry& algoEntry(priocclAlgorithm_t id) {
  for (const AlgoEntry& e : algoRegistry())
    if (e.id == id) return e;
  detail::fail(priocclInternalError, "no all-reduce algorithm with value ", static_cast<int>(id));
}

const AlgoEntry* findAlgo(const char* name) {
  for (const AlgoEntry& e : algoRegistry())
    if (!strcasecmp(name, e.name) || (*e.alias && !strcasecmp(name, e.alias))) return &e;
  return nullptr;
}

}  // namespace prioccl
