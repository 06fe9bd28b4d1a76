// allreduce_perf --transport all: prioccl over its MPI transport against prioccl over UCX and
// against MPI_Allreduce, in one run.
#pragma once

#include "allreduce_common.h"

namespace perf {

// Creates one communicator per transport (mpi, ucx; o.config otherwise; both alive for the whole
// run) and times them and MPI_Allreduce interleaved at every size; rank 0 prints one row per size
// and a summary. Collective over MPI_COMM_WORLD. Returns the number of wrong elements (all
// variants, all sizes, all ranks; 0 when not checked). Throws prioccl::Error, e.g. when prioccl
// was built without UCX.
long long compareTransports(const BenchOptions& o, int rank, int p);

}  // namespace perf
