#include "topology/local_topology.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <iterator>
#include <string>
#include <utility>

#ifdef PRIOCCL_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace prioccl::topology {
namespace {

// Far beyond any Linux kernel's NR_CPUS (8192 today): a larger index is a caller's mistake, and
// refusing it keeps a typo from allocating a huge mask.
constexpr int kMaxCpuIndex = 1 << 20;

// A cpu_set_t sized for `count` CPUs (CPU_ALLOC), so machines beyond CPU_SETSIZE (1024) work.
class CpuMask {
 public:
  explicit CpuMask(int count) : set_(CPU_ALLOC(count)), bytes_(CPU_ALLOC_SIZE(count)) {
    if (set_) CPU_ZERO_S(bytes_, set_);
  }
  ~CpuMask() {
    if (set_) CPU_FREE(set_);
  }
  CpuMask(const CpuMask&) = delete;
  CpuMask& operator=(const CpuMask&) = delete;
  cpu_set_t* get() const { return set_; }
  size_t bytes() const { return bytes_; }

 private:
  cpu_set_t* set_;
  size_t bytes_;
};

std::vector<int> sortedUnique(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

std::vector<int> intersection(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> sa = sortedUnique(a), sb = sortedUnique(b), out;
  std::set_intersection(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(out));
  return out;
}

int onlineCpus() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 && n <= INT_MAX ? static_cast<int>(n) : 1;
}

// The CPUs this process may run on. The kernel refuses (EINVAL) a mask smaller than its own
// CPU count, so the mask grows until it fits; {} if it never does.
std::vector<int> processAffinity() {
  for (int count = CPU_SETSIZE; count <= kMaxCpuIndex; count *= 2) {
    CpuMask mask(count);
    if (!mask.get()) return {};
    if (sched_getaffinity(0, mask.bytes(), mask.get()) == 0) {
      std::vector<int> cpus;
      for (int cpu = 0; cpu < count; ++cpu)
        if (CPU_ISSET_S(cpu, mask.bytes(), mask.get())) cpus.push_back(cpu);
      return cpus;
    }
    if (errno != EINVAL) return {};
  }
  return {};
}

// The process's binding against a machine of topo.pus PUs.
void fillProcess(LocalTopology& topo) {
  topo.processCpus = processAffinity();
  topo.processBound =
      !topo.processCpus.empty() && static_cast<int>(topo.processCpus.size()) < topo.pus;
}

// What is known without hwloc: the online CPU count. Each counts as a core, and one NUMA node is
// assumed, so callers that divide by these never divide by zero.
LocalTopology fallback(std::string why) {
  LocalTopology topo;
  topo.source = std::move(why) + " (online CPUs from sysconf; cores, NUMA nodes, devices unknown)";
  topo.pus = topo.cores = onlineCpus();
  topo.numaNodes = 1;
  fillProcess(topo);
  return topo;
}

#ifdef PRIOCCL_HAVE_HWLOC

class HwlocTopology {
 public:
  HwlocTopology() {
    if (hwloc_topology_init(&topo_) != 0) {
      error_ = errno;
      topo_ = nullptr;
    }
  }
  ~HwlocTopology() {
    if (topo_) hwloc_topology_destroy(topo_);
  }
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;
  hwloc_topology_t get() const { return topo_; }
  int error() const { return error_; }

 private:
  hwloc_topology_t topo_ = nullptr;
  int error_ = 0;
};

std::string errnoText(const char* call, int error) {
  return std::string(call) + " failed: " + (error ? std::strerror(error) : "unknown error");
}

// A cpuset's or nodeset's OS indexes; {} for a missing or infinite set (unknown).
std::vector<int> osIndexes(hwloc_const_bitmap_t set) {
  std::vector<int> out;
  if (!set || hwloc_bitmap_weight(set) < 0) return out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

// An I/O object's locality is that of its first non-I/O ancestor (the package, NUMA-node group or
// machine its PCI bus hangs off). A single NUMA node only when that ancestor has exactly one: a
// device hanging off the whole machine is near no node in particular.
void locality(hwloc_topology_t topo, hwloc_obj_t obj, int* numaNode, std::vector<int>* cpus) {
  hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (!ancestor) return;
  *cpus = osIndexes(ancestor->cpuset);
  if (ancestor->nodeset && hwloc_bitmap_weight(ancestor->nodeset) == 1)
    *numaNode = hwloc_bitmap_first(ancestor->nodeset);
}

hwloc_obj_t pciParent(hwloc_obj_t obj) {
  return obj->parent && obj->parent->type == HWLOC_OBJ_PCI_DEVICE ? obj->parent : nullptr;
}

std::string pciBusId(hwloc_obj_t pci) {
  char text[32];
  std::snprintf(text, sizeof text, "%04x:%02x:%02x.%x", pci->attr->pcidev.domain,
                pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
  return text;
}

// Which of a GPU's OS devices names it: the compute APIs' names (what users see in
// CUDA_VISIBLE_DEVICES and nvidia-smi) before the display driver's card/renderD nodes.
int gpuNameRank(hwloc_obj_t osdev) {
  static const char* const kPreferred[] = {"CUDA", "NVML", "RSMI", "LevelZero", "OpenCL"};
  if (osdev->subtype)
    for (int i = 0; i < static_cast<int>(std::size(kPreferred)); ++i)
      if (std::strcmp(osdev->subtype, kPreferred[i]) == 0) return i;
  return osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC ? 5 : 6;
}
constexpr int kBusIdRank = 7;

void readDevices(hwloc_topology_t topo, LocalTopology& out) {
  // GPUs are gathered per physical device: one GPU carries several OS devices (card1, renderD128,
  // cuda0, nvml0, opencl0d0), and Debian's hwloc has no CUDA plugin, so a GPU may have none and
  // only its PCI class says what it is.
  struct GpuKey {
    hwloc_obj_t device;  // its PCI device, or the OS device itself when it has none
    int nameRank;
  };
  std::vector<GpuKey> gpuKeys;
  auto addGpu = [&](hwloc_obj_t device, std::string name, int rank) {
    for (size_t i = 0; i < gpuKeys.size(); ++i) {
      if (gpuKeys[i].device != device) continue;
      if (rank < gpuKeys[i].nameRank || (rank == gpuKeys[i].nameRank && name < out.gpus[i].name)) {
        gpuKeys[i].nameRank = rank;
        out.gpus[i].name = std::move(name);
      }
      return;
    }
    Gpu gpu;
    gpu.name = std::move(name);
    locality(topo, device, &gpu.numaNode, &gpu.localCpus);
    out.gpus.push_back(std::move(gpu));
    gpuKeys.push_back({device, rank});
  };

  for (hwloc_obj_t pci = nullptr; (pci = hwloc_get_next_pcidev(topo, pci)) != nullptr;)
    if ((pci->attr->pcidev.class_id >> 8) == 0x03) addGpu(pci, pciBusId(pci), kBusIdRank);

  for (hwloc_obj_t os = nullptr; (os = hwloc_get_next_osdev(topo, os)) != nullptr;) {
    if (!os->name) continue;
    switch (os->attr->osdev.type) {
      case HWLOC_OBJ_OSDEV_OPENFABRICS:
      case HWLOC_OBJ_OSDEV_NETWORK: {
        if (std::strncmp(os->name, "lo", 2) == 0) break;
        Nic nic;
        nic.name = os->name;
        nic.rdma = os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
        locality(topo, os, &nic.numaNode, &nic.localCpus);
        out.nics.push_back(std::move(nic));
        break;
      }
      case HWLOC_OBJ_OSDEV_GPU:
      case HWLOC_OBJ_OSDEV_COPROC: {
        hwloc_obj_t pci = pciParent(os);
        addGpu(pci ? pci : os, os->name, gpuNameRank(os));
        break;
      }
      default:
        break;
    }
  }
}

// Loads hwloc's topology (from `xml` when given) and reads it; the fallback on any failure.
LocalTopology discoverWithHwloc(const std::string* xml) {
  // A library of another major API version would misread our structures.
  if ((hwloc_get_api_version() >> 16) != (HWLOC_API_VERSION >> 16))
    return fallback("hwloc's library is not the API version prioccl was built with");
  HwlocTopology hw;
  hwloc_topology_t topo = hw.get();
  if (!topo) return fallback(errnoText("hwloc_topology_init", hw.error()));
  // Every online PU, including those a cgroup (container, batch job) keeps this process from:
  // `pus` is the machine, and such a cgroup then reads as the binding it is.
  hwloc_topology_set_flags(topo, HWLOC_TOPOLOGY_FLAG_INCLUDE_DISALLOWED);
  // I/O discovery is off by default; "important" keeps NICs, GPUs and their PCI path.
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  // Components with side effects on the process: x86 moves the calling thread across every PU
  // (even outside the user's binding) to run CPUID, only to annotate what Linux's sysfs already
  // said; the GPU runtimes' components load libcuda, OpenCL ICDs or X11 into the process, which
  // turns prioccl's device-buffer detection on (device_memory.cpp) and can cost seconds. GPUs are
  // still found by their PCI class. Absent components fail here harmlessly.
  for (const char* component : {"x86", "cuda", "nvml", "opencl", "rsmi", "levelzero", "gl"})
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, component);
  if (xml) {
    if (xml->size() >= static_cast<size_t>(INT_MAX))
      return fallback("hwloc_topology_set_xmlbuffer failed: XML too large");
    if (hwloc_topology_set_xmlbuffer(topo, xml->c_str(), static_cast<int>(xml->size()) + 1) != 0)
      return fallback(errnoText("hwloc_topology_set_xmlbuffer", errno));
  }
  if (hwloc_topology_load(topo) != 0) return fallback(errnoText("hwloc_topology_load", errno));

  LocalTopology out;
  out.discovered = true;
  out.source = "hwloc " HWLOC_VERSION;
  if (!hwloc_topology_is_thissystem(topo)) out.source += " (not this system)";
  out.packages = std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE));
  out.pus = std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU));
  out.cores = std::max(0, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE));
  if (out.cores == 0) out.cores = out.pus;  // no core level known: each PU is its own core
  out.numaNodes = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
  if (out.pus == 0) return fallback("hwloc found no PU");
  readDevices(topo, out);
  if (xml) {
    out.processCpus = osIndexes(hwloc_get_root_obj(topo)->cpuset);
    out.processBound = false;
  } else {
    fillProcess(out);
  }
  return out;
}

#endif  // PRIOCCL_HAVE_HWLOC

LocalTopology discover(const std::string* xml) {
  try {
#ifdef PRIOCCL_HAVE_HWLOC
    return discoverWithHwloc(xml);
#else
    (void)xml;
    return fallback("built without hwloc");
#endif
  } catch (const std::exception& e) {
    return fallback(std::string("topology discovery failed: ") + e.what());
  } catch (...) {
    return fallback("topology discovery failed");
  }
}

std::string plural(int n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// "(rdma, numa 0, cpus 0-7)": only what is known and says something (not "every CPU").
std::string deviceText(const std::string& name, bool rdma, int numaNode,
                       const std::vector<int>& cpus, int pus) {
  std::vector<std::string> facts;
  if (rdma) facts.push_back("rdma");
  if (numaNode >= 0) facts.push_back("numa " + std::to_string(numaNode));
  if (!cpus.empty() && static_cast<int>(cpus.size()) < pus)
    facts.push_back("cpus " + cpuListText(cpus));
  std::string text = name;
  for (size_t i = 0; i < facts.size(); ++i) text += (i == 0 ? " (" : ", ") + facts[i];
  if (!facts.empty()) text += ")";
  return text;
}

}  // namespace

LocalTopology discoverLocalTopology() {
  return discover(nullptr);
}

LocalTopology discoverLocalTopologyFromXml(const std::string& xml) {
  return discover(&xml);
}

const Nic* nearestNic(const std::vector<Nic>& nics, const std::vector<int>& cpus) {
  const Nic* best = nullptr;
  size_t bestOverlap = 0;
  for (const Nic& nic : nics) {
    size_t overlap = intersection(nic.localCpus, cpus).size();
    bool better = !best || overlap > bestOverlap;
    if (best && overlap == bestOverlap)
      better = nic.rdma != best->rdma ? nic.rdma : nic.name < best->name;
    if (better) {
      best = &nic;
      bestOverlap = overlap;
    }
  }
  return best;
}

std::vector<int> progressThreadCpus(const LocalTopology& topo, const Nic* nic) {
  if (!nic || nic->localCpus.empty()) return {};
  if (topo.processBound) {
    std::vector<int> near = intersection(topo.processCpus, nic->localCpus);
    if (!near.empty() && near.size() < sortedUnique(topo.processCpus).size()) return near;
    return {};
  }
  std::vector<int> near = sortedUnique(nic->localCpus);
  // A no-op for an unbound process (it may run everywhere); it only guards against a topology
  // that is not this process's machine handing out CPUs the process may not use.
  if (!topo.processCpus.empty()) near = intersection(near, topo.processCpus);
  if (!near.empty() && static_cast<int>(near.size()) < topo.pus) return near;
  return {};
}

bool bindThread(pthread_t thread, const std::vector<int>& cpus, std::string* why) {
  auto fail = [why](std::string text) {
    if (why) *why = std::move(text);
    return false;
  };
  if (cpus.empty()) return fail("no CPUs to bind to");
  auto [lowest, highest] = std::minmax_element(cpus.begin(), cpus.end());
  if (*lowest < 0) return fail("negative CPU index " + std::to_string(*lowest));
  if (*highest >= kMaxCpuIndex) return fail("CPU index " + std::to_string(*highest) + " too large");
  CpuMask mask(std::max(*highest + 1, CPU_SETSIZE));
  if (!mask.get()) return fail("CPU_ALLOC failed");
  for (int cpu : cpus) CPU_SET_S(cpu, mask.bytes(), mask.get());
  int rc = pthread_setaffinity_np(thread, mask.bytes(), mask.get());
  if (rc != 0)
    return fail("pthread_setaffinity_np(cpus " + cpuListText(sortedUnique(cpus)) +
                ") failed: " + std::strerror(rc));
  return true;
}

std::string cpuListText(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t last = i;  // the run cpus[i..last] of consecutive indexes (duplicates tolerated)
    while (last + 1 < cpus.size() &&
           (cpus[last + 1] == cpus[last] + 1 || cpus[last + 1] == cpus[last]))
      ++last;
    if (!text.empty()) text += ",";
    text += std::to_string(cpus[i]);
    if (cpus[last] != cpus[i]) text += "-" + std::to_string(cpus[last]);
    i = last + 1;
  }
  return text;
}

std::string describe(const LocalTopology& topo) {
  std::string text;
  if (topo.packages > 0) text += plural(topo.packages, "package") + ", ";
  text += plural(topo.cores, "core") + " / " + plural(topo.pus, "PU") + ", ";
  text += plural(topo.numaNodes, "NUMA node") + ", ";
  if (topo.processCpus.empty())
    text += "process binding unknown";
  else if (topo.processBound)
    text += "process bound to cpus " + cpuListText(topo.processCpus);
  else
    text += "process not bound";
  text += ", NICs: ";
  if (topo.nics.empty()) text += "none";
  for (size_t i = 0; i < topo.nics.size(); ++i) {
    const Nic& nic = topo.nics[i];
    text += (i ? ", " : "") + deviceText(nic.name, nic.rdma, nic.numaNode, nic.localCpus, topo.pus);
  }
  text += ", GPUs: ";
  if (topo.gpus.empty()) text += "none";
  for (size_t i = 0; i < topo.gpus.size(); ++i) {
    const Gpu& gpu = topo.gpus[i];
    text += (i ? ", " : "") + deviceText(gpu.name, false, gpu.numaNode, gpu.localCpus, topo.pus);
  }
  return text + " [" + topo.source + "]";
}

}  // namespace prioccl::topology
