// Which ranks of a communicator share a host, found at creation over the bootstrap.
//
// Ranks share a host when they share memory (MPI_COMM_TYPE_SHARED: the launcher's view) *and*
// a hostname. The launcher alone is not enough: emulated hosts on one machine (network and UTS
// namespaces, perf/testbed.sh) share one kernel, so MPI sees a single node, while their hostnames
// differ. PRIOCCL_HOST_ID replaces both for set-ups neither can see (ranks with equal values
// share a host).
#pragma once

#include <string>
#include <vector>

#include "algo/host_layout.h"
#include "algo/select.h"

namespace prioccl {

class Bootstrap;

struct HostGroups {
  HostLayout layout;
  std::vector<std::string> names;  // per host: its hostname, or its PRIOCCL_HOST_ID
};

// Collective over the bootstrap (one shared-memory split, one all-gather). `hostId`: this rank's
// PRIOCCL_HOST_ID, empty for the detection.
HostGroups detectHostGroups(Bootstrap& bootstrap, const std::string& hostId);

// Collective: the links inside the hosts (a ring over each host's ranks) and across them (a ring
// over the ranks of each local index below the fewest per host, all such rings at once, as the
// hierarchical all-reduce runs them), the slowest of each on every rank. Nothing (hosts = 0)
// unless the layout has two levels.
HostLevels measureHostLevels(Bootstrap& bootstrap, const HostLayout& layout);

}  // namespace prioccl
