// Collective argument check for the training modes' constructors: every rank must pass the same
// values, or each rank gets InvalidUsage naming the first field that differs.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include "prioccl/prioccl.hpp"

namespace prioccl::detail {

// Whether comm's collectives take device buffers only (PRIOCCL_TRANSPORT=nccl): the modes'
// own buffers must then be device memory.
bool collectivesOnDevice(const Communicator& comm);

void agreeAcrossRanks(const Communicator& comm, const char* what,
                      std::initializer_list<std::pair<const char*, long long>> fields);
// The same for hyper-parameters (finite doubles, compared exactly).
void agreeOnDoublesAcrossRanks(const Communicator& comm, const char* what,
                               std::initializer_list<std::pair<const char*, double>> fields);

}  // namespace prioccl::detail
