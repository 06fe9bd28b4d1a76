// The cost model's calibration at communicator creation: timing every all-reduce algorithm at the
// calibration sizes on the communicator being created, and the process-wide cache of models
// measured so far, so that communicators over the same ranks choose alike (and so give the same
// bits). CommImpl::agreeAndCalibrate decides, with every rank, whether to measure or reuse.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "algo/select.h"
#include "prioccl/prioccl.h"

namespace prioccl::detail::calibration {

// One blocking all-reduce on the communicator being created, with the given algorithm; returns
// its wall time in seconds.
using RunAllReduce =
    std::function<double(const void* send, void* recv, size_t count, priocclDataType_t dtype,
                         priocclRedOp_t op, priocclAlgorithm_t algo)>;

// Times each algorithm (the hierarchical one only with two levels) at the calibration sizes,
// interleaved, takes each one's median, and fits `selector` to the slowest rank's medians (one
// more all-reduce, of the table, with Max). Collective: every rank calls it alike.
void measure(AlgoSelector& selector, int nranks, bool twoLevel, const RunAllReduce& runAllReduce);

// The model measured for `key` (the group's process ids, chunk size, transport, host layout) in
// this process, or null. Entries are never erased, so the pointer stays valid.
const AlgoSelector* known(const std::vector<int>& key);
void remember(const std::vector<int>& key, const AlgoSelector& selector);

}  // namespace prioccl::detail::calibration
