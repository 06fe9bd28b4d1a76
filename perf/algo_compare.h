// allreduce_perf --algo all: prioccl's automatic algorithm choice against each fixed algorithm
// (ring, tree, recursive doubling, halving-doubling) and against MPI_Allreduce, in one run.
#pragma once

#include "allreduce_common.h"

namespace perf {

// Creates one communicator per algorithm (auto, ring, tree, rd, hd; all alive for the whole run)
// and times them and MPI_Allreduce interleaved at every size; rank 0 prints one row per size and a
// summary. Collective over MPI_COMM_WORLD. Returns the number of wrong elements (all variants,
// all sizes, all ranks; 0 when not checked). Throws prioccl::Error.
long long compareAlgorithms(const BenchOptions& o, int rank, int p);

}  // namespace perf
