// The local machine as far as placement needs it: how many cores and NUMA nodes there are, which
// CPUs this process may run on, and which CPUs are near each NIC and GPU. Discovered with hwloc
// when the build has it (PRIOCCL_WITH_HWLOC); otherwise only the online CPU count is known and
// no device is reported, so callers must treat every locality as "unknown".
//
// Discovery (discoverLocalTopology) is separate from the choices made on its result (nearestNic,
// progressThreadCpus): the choices are pure functions, so they are tested on made-up machines.
#pragma once

#include <pthread.h>

#include <string>
#include <vector>

namespace prioccl::topology {

struct Nic {
  std::string name;   // the OS device name as hwloc reports it: "mlx5_0" (verbs), "eth0" (network)
  bool rdma = false;  // an OpenFabrics (verbs) device
  int numaNode = -1;  // OS index of the NUMA node it is attached to; -1: unknown or several
  std::vector<int> localCpus;  // sorted OS indexes of the PUs near it; empty: unknown
};

// One per physical GPU: a PCI device of class 0x03xx (display) or one that carries GPU or
// co-processor OS devices (CUDA, NVML, OpenCL, ...), however many of those it carries.
struct Gpu {
  std::string name;  // its preferred OS device name ("cuda0", "nvml0", "card1") or PCI bus id
  int numaNode = -1;
  std::vector<int> localCpus;
};

struct LocalTopology {
  bool discovered = false;  // hwloc loaded a topology (false: the sysconf fallback)
  std::string
      source;        // "hwloc 2.9.0", or why not ("built without hwloc", "hwloc_topology_load ...")
  int packages = 0;  // 0: unknown (the fallback)
  int cores = 0;
  int pus = 0;  // every PU the machine has online, not only those this process may use
  int numaNodes = 0;
  std::vector<int> processCpus;  // the process's own binding (sched_getaffinity), sorted
  bool processBound = false;     // processCpus is narrower than all `pus`
  // Physical devices only (hwloc reports no loopback or virtual ones). A card with both a verbs
  // device and a network interface (mlx5_0 and ib0) is listed under both names.
  std::vector<Nic> nics;
  std::vector<Gpu> gpus;
};

// The machine this process runs on. Never throws: whatever cannot be found is left unknown and
// `source` says why. Loads hwloc's topology with I/O devices (tens of milliseconds on large
// machines): call it once, not per operation. hwloc honours HWLOC_XMLFILE and HWLOC_SYNTHETIC,
// which replace the real machine (then `source` says "not this system").
LocalTopology discoverLocalTopology();

// For tests: the machine described by hwloc 2.x XML `xml`. The process's real binding means
// nothing on another machine, so it is reported as running unbound on every PU of the XML.
LocalTopology discoverLocalTopologyFromXml(const std::string& xml);

// The NIC for a rank bound to `cpus`: the one whose localCpus overlap `cpus` most; ties: RDMA
// first, then the lower name. nullptr when `nics` is empty.
const Nic* nearestNic(const std::vector<Nic>& nics, const std::vector<int>& cpus);

// Where the progress thread should run; {} means "leave it where it is" (it inherits the
// process's binding). Never against the user's binding:
//  - bound process: processCpus ∩ nic->localCpus, when non-empty and narrower than processCpus;
//  - unbound process: nic->localCpus, when known and narrower than all PUs (an unbound job may be
//    oversubscribed on purpose, so no binding is invented without a NIC to be near).
std::vector<int> progressThreadCpus(const LocalTopology& topo, const Nic* nic);

// Binds `thread` to `cpus` (pthread_setaffinity_np). false, with *why (when not null) set, on
// failure: empty or negative indexes, or CPUs the kernel refuses.
bool bindThread(pthread_t thread, const std::vector<int>& cpus, std::string* why);

// A sorted index list in the kernel's cpulist style for log lines: "0-3,8"; "" when empty.
std::string cpuListText(const std::vector<int>& cpus);

// One line for the log, e.g. "1 package, 2 cores / 2 PUs, 1 NUMA node, process not bound
// (cpus 0-1), NICs: mlx5_0 (rdma, numa 0), GPUs: none [hwloc 2.9.0]".
std::string describe(const LocalTopology& topo);

}  // namespace prioccl::topology
