#include "topology/placement.h"

#include <mutex>

namespace prioccl {

Placement choosePlacement(bool enabled, const char* userNetDevices,
                          const topology::LocalTopology& topo) {
  Placement p;
  p.topo = &topo;
  const topology::Nic* nic = topology::nearestNic(topo.nics, topo.processCpus);
  if (nic) p.nic = nic->name;
  if (!enabled) {
    p.ucxNetDevicesWhy = "PRIOCCL_PLACEMENT=0";
    return p;
  }
  p.progressCpus = topology::progressThreadCpus(topo, nic);
  if (userNetDevices) {
    p.ucxNetDevicesWhy = "UCX_NET_DEVICES set by the user";
  } else if (topo.nics.size() < 2) {
    p.ucxNetDevicesWhy = "no choice to make";  // one device or none: UCX's default is it
  } else {
    // UCX names a verbs device by its port ("mlx5_0:1"); the first port is the usual one.
    p.ucxNetDevices = nic->rdma ? nic->name + ":1" : nic->name;
  }
  return p;
}

Placement choosePlacement(bool enabled, const char* userNetDevices) {
  // The machine does not change under a process: one discovery serves every communicator.
  static std::once_flag once;
  static topology::LocalTopology topo;
  std::call_once(once, [] { topo = topology::discoverLocalTopology(); });
  return choosePlacement(enabled, userNetDevices, topo);
}

std::string Placement::describe() const {
  std::string s = topo ? topology::describe(*topo) : std::string("topology unknown");
  s += "; NIC " + (nic.empty() ? std::string("none found") : nic);
  s += ucxNetDevices.empty() ? " (UCX's choice: " + ucxNetDevicesWhy + ")"
                             : " (UCX_NET_DEVICES=" + ucxNetDevices + ")";
  s += "; progress thread " + (progressCpus.empty()
                                   ? std::string("on the rank's CPUs")
                                   : "on cpus " + topology::cpuListText(progressCpus));
  return s;
}

}  // namespace prioccl
