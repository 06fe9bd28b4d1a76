// Where this rank's communication runs on its host (PRIOCCL_PLACEMENT): the network device
// nearest the rank's CPUs, given to UCX when the host has several and the user chose none, and the
// CPUs for the progress thread (near that device, never outside the rank's own binding).
#pragma once

#include <string>
#include <vector>

#include "topology/local_topology.h"

namespace prioccl {

struct Placement {
  const topology::LocalTopology* topo = nullptr;  // this process's, discovered once
  std::string nic;                                // the nearest device ("": none known)
  std::string ucxNetDevices;                      // for UCX's NET_DEVICES ("": leave UCX's)
  std::string ucxNetDevicesWhy;                   // why it is left (for the log line)
  std::vector<int> progressCpus;                  // empty: the thread keeps the rank's binding
  std::string describe() const;                   // one clause for the host's log line
};

// `enabled`: Config::placement; `userNetDevices`: UCX_NET_DEVICES as the user set it (null:
// unset). Discovers the local topology the first time (tens of ms), then reuses it.
Placement choosePlacement(bool enabled, const char* userNetDevices);

// The pure rule, for tests: `topo` is any machine's.
Placement choosePlacement(bool enabled, const char* userNetDevices,
                          const topology::LocalTopology& topo);

}  // namespace prioccl
