// The all-reduce algorithms, one row each: what the engine, the cost model and the parsers need
// to know about an algorithm, so that adding one means its step machine (one file pair, as
// ring.h/ring.cpp) plus one row in registry.cpp and its value in priocclAlgorithm_t.
// (The agreement and point-to-point step machines are not here: nothing chooses them.)
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "algo/chunk_algo.h"
#include "prioccl/prioccl.h"

namespace prioccl {

class ScratchPool;

struct AlgoEntry {
  priocclAlgorithm_t id;
  const char* name;          // PRIOCCL_ALGO, size rules, logs: "ring"
  const char* alias;         // also accepted, never printed ("" when none): "recursive_doubling"
  int (*steps)(int nranks);  // distinct step ids of one chunk on nranks ranks
  // Scratch one chunk of chunkBytes needs at most on nranks ranks.
  size_t (*scratchBytes)(size_t chunkBytes, int nranks);
  // Bytes each rank sends per byte of op: the cost model's floor at the link's bandwidth.
  double (*sendFactor)(int nranks);
  // How the chunk runner cuts an op. An op of a few chunks is cut finer so that several chunks
  // pipeline, except for an algorithm whose per-chunk cost is a fixed number of rounds (recursive
  // doubling, halving-doubling): it gains nothing from that and pays the rounds per piece. An
  // algorithm whose step moves chunk / p (the ring, and the hierarchical all-reduce's rings)
  // stops the finer cut before its steps get so short that per-message costs rule.
  enum class Cut : unsigned char { kWholeChunks, kFiner, kFinerKeepingSteps };
  Cut cut;
  // The agreement chunk may reduce ops up to its carry size by this algorithm itself (small ops
  // then cost one agreement, not an agreement plus a chunk).
  bool agreementCarries;
  std::unique_ptr<ChunkAlgo> (*make)(const ChunkSpec& spec, ScratchPool& scratch);
};

// Every algorithm, in the order the cost model measures and lists them.
const std::vector<AlgoEntry>& algoRegistry();
// The row of `id`; throws InternalError for auto or a value outside the table.
const AlgoEntry& algoEntry(priocclAlgorithm_t id);
// The row named `name` or its alias (case-insensitive); nullptr when none.
const AlgoEntry* findAlgo(const char* name);

}  // namespace prioccl
