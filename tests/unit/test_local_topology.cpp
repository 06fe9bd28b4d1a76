// The local topology (src/topology/local_topology.cpp): discovery on this machine and on made-up
// ones (hwloc's XML and synthetic topologies, so NICs and GPUs are tested without the hardware),
// and the placement choices made from it, on hand-written values.
#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "topology/local_topology.h"
#include "topology/placement.h"

namespace {

using prioccl::topology::bindThread;
using prioccl::topology::cpuListText;
using prioccl::topology::describe;
using prioccl::topology::discoverLocalTopology;
using prioccl::topology::discoverLocalTopologyFromXml;
using prioccl::topology::Gpu;
using prioccl::topology::LocalTopology;
using prioccl::topology::nearestNic;
using prioccl::topology::Nic;
using prioccl::topology::progressThreadCpus;

Nic nic(std::string name, bool rdma, std::vector<int> cpus, int numaNode = -1) {
  Nic n;
  n.name = std::move(name);
  n.rdma = rdma;
  n.localCpus = std::move(cpus);
  n.numaNode = numaNode;
  return n;
}

// Sets an environment variable for one scope, restoring what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Two packages of two single-PU cores, one NUMA node each. Package 0 has an Ethernet port (eth0);
// package 1 a ConnectX (verbs mlx5_0 and its interface ib0) and an NVIDIA GPU with its display
// node, CUDA and NVML devices: one GPU, named cuda0.
const char kTwoSocketXml[] = R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
 <object type="Machine" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f"
         allowed_cpuset="0x0000000f" nodeset="0x00000003" complete_nodeset="0x00000003"
         allowed_nodeset="0x00000003">
  <object type="Package" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003"
          nodeset="0x00000001" complete_nodeset="0x00000001">
   <object type="NUMANode" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003"
           nodeset="0x00000001" complete_nodeset="0x00000001" local_memory="1073741824"/>
   <object type="Core" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001"
           nodeset="0x00000001" complete_nodeset="0x00000001">
    <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001"
            nodeset="0x00000001" complete_nodeset="0x00000001"/>
   </object>
   <object type="Core" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002"
           nodeset="0x00000001" complete_nodeset="0x00000001">
    <object type="PU" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002"
            nodeset="0x00000001" complete_nodeset="0x00000001"/>
   </object>
   <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[00-01]">
    <object type="PCIDev" pci_busid="0000:00:03.0" pci_type="0200 [8086:1533] [8086:0000] 03"
            pci_link_speed="0.250000">
     <object type="OSDev" name="eth0" osdev_type="2"/>
    </object>
   </object>
  </object>
  <object type="Package" os_index="1" cpuset="0x0000000c" complete_cpuset="0x0000000c"
          nodeset="0x00000002" complete_nodeset="0x00000002">
   <object type="NUMANode" os_index="1" cpuset="0x0000000c" complete_cpuset="0x0000000c"
           nodeset="0x00000002" complete_nodeset="0x00000002" local_memory="1073741824"/>
   <object type="Core" os_index="0" cpuset="0x00000004" complete_cpuset="0x00000004"
           nodeset="0x00000002" complete_nodeset="0x00000002">
    <object type="PU" os_index="2" cpuset="0x00000004" complete_cpuset="0x00000004"
            nodeset="0x00000002" complete_nodeset="0x00000002"/>
   </object>
   <object type="Core" os_index="1" cpuset="0x00000008" complete_cpuset="0x00000008"
           nodeset="0x00000002" complete_nodeset="0x00000002">
    <object type="PU" os_index="3" cpuset="0x00000008" complete_cpuset="0x00000008"
            nodeset="0x00000002" complete_nodeset="0x00000002"/>
   </object>
   <object type="Bridge" bridge_type="0-1" depth="0" bridge_pci="0000:[80-82]">
    <object type="PCIDev" pci_busid="0000:81:00.0" pci_type="0207 [15b3:1017] [15b3:0007] 00"
            pci_link_speed="15.753846">
     <object type="OSDev" name="ib0" osdev_type="2"/>
     <object type="OSDev" name="mlx5_0" osdev_type="3"/>
    </object>
    <object type="PCIDev" pci_busid="0000:82:00.0" pci_type="0302 [10de:20b0] [10de:134f] a1"
            pci_link_speed="31.507692">
     <object type="OSDev" name="card1" osdev_type="1"/>
     <object type="OSDev" name="nvml0" subtype="NVML" osdev_type="1"/>
     <object type="OSDev" name="cuda0" subtype="CUDA" osdev_type="5"/>
    </object>
   </object>
  </object>
 </object>
</topology>
)";

// One package, one NUMA node, two cores of two PUs each, and no I/O at all.
const char kNoIoXml[] = R"(<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
 <object type="Machine" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f"
         allowed_cpuset="0x0000000f" nodeset="0x00000001" complete_nodeset="0x00000001"
         allowed_nodeset="0x00000001">
  <object type="Package" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f"
          nodeset="0x00000001" complete_nodeset="0x00000001">
   <object type="NUMANode" os_index="0" cpuset="0x0000000f" complete_cpuset="0x0000000f"
           nodeset="0x00000001" complete_nodeset="0x00000001" local_memory="1073741824"/>
   <object type="Core" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003"
           nodeset="0x00000001" complete_nodeset="0x00000001">
    <object type="PU" os_index="0" cpuset="0x00000001" complete_cpuset="0x00000001"
            nodeset="0x00000001" complete_nodeset="0x00000001"/>
    <object type="PU" os_index="1" cpuset="0x00000002" complete_cpuset="0x00000002"
            nodeset="0x00000001" complete_nodeset="0x00000001"/>
   </object>
   <object type="Core" os_index="1" cpuset="0x0000000c" complete_cpuset="0x0000000c"
           nodeset="0x00000001" complete_nodeset="0x00000001">
    <object type="PU" os_index="2" cpuset="0x00000004" complete_cpuset="0x00000004"
            nodeset="0x00000001" complete_nodeset="0x00000001"/>
    <object type="PU" os_index="3" cpuset="0x00000008" complete_cpuset="0x00000008"
            nodeset="0x00000001" complete_nodeset="0x00000001"/>
   </object>
  </object>
 </object>
</topology>
)";

const Nic* findNic(const LocalTopology& topo, const std::string& name) {
  for (const Nic& n : topo.nics)
    if (n.name == name) return &n;
  return nullptr;
}

// ---- discovery ----

TEST(LocalTopology, ThisMachine) {
  LocalTopology topo = discoverLocalTopology();
  std::cout << "this machine: " << describe(topo) << "\n";
#ifdef PRIOCCL_HAVE_HWLOC
  EXPECT_TRUE(topo.discovered) << topo.source;
  EXPECT_EQ(topo.source.rfind("hwloc ", 0), 0u) << topo.source;
#else
  EXPECT_FALSE(topo.discovered);
  EXPECT_NE(topo.source.find("built without hwloc"), std::string::npos) << topo.source;
  EXPECT_TRUE(topo.nics.empty());
  EXPECT_TRUE(topo.gpus.empty());
#endif
  EXPECT_EQ(topo.pus, sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_GE(topo.cores, 1);
  EXPECT_LE(topo.cores, topo.pus);
  EXPECT_GE(topo.numaNodes, 1);
  ASSERT_FALSE(topo.processCpus.empty());
  for (size_t i = 0; i < topo.processCpus.size(); ++i) {
    EXPECT_GE(topo.processCpus[i], 0);
    if (i > 0) {
      EXPECT_LT(topo.processCpus[i - 1], topo.processCpus[i]) << "not sorted";
    }
  }
  EXPECT_EQ(topo.processBound, static_cast<int>(topo.processCpus.size()) < topo.pus);
  for (const Nic& n : topo.nics) {
    EXPECT_FALSE(n.name.empty());
    EXPECT_NE(n.name.rfind("lo", 0), 0u) << n.name;
  }
  EXPECT_FALSE(describe(topo).empty());
}

TEST(LocalTopology, XmlWithNicsAndAGpu) {
#ifndef PRIOCCL_HAVE_HWLOC
  GTEST_SKIP() << "built without hwloc: no XML topologies";
#endif
  LocalTopology topo = discoverLocalTopologyFromXml(kTwoSocketXml);
  ASSERT_TRUE(topo.discovered) << topo.source;
  EXPECT_NE(topo.source.find("not this system"), std::string::npos) << topo.source;
  EXPECT_EQ(topo.packages, 2);
  EXPECT_EQ(topo.cores, 4);
  EXPECT_EQ(topo.pus, 4);
  EXPECT_EQ(topo.numaNodes, 2);
  EXPECT_EQ(topo.processCpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_FALSE(topo.processBound);

  ASSERT_EQ(topo.nics.size(), 3u) << describe(topo);
  const Nic* eth0 = findNic(topo, "eth0");
  const Nic* ib0 = findNic(topo, "ib0");
  const Nic* mlx = findNic(topo, "mlx5_0");
  ASSERT_TRUE(eth0 && ib0 && mlx) << describe(topo);
  EXPECT_FALSE(eth0->rdma);
  EXPECT_EQ(eth0->numaNode, 0);
  EXPECT_EQ(eth0->localCpus, (std::vector<int>{0, 1}));
  EXPECT_FALSE(ib0->rdma);
  EXPECT_TRUE(mlx->rdma);
  EXPECT_EQ(mlx->numaNode, 1);
  EXPECT_EQ(mlx->localCpus, (std::vector<int>{2, 3}));

  // Three OS devices on one PCI device: one GPU, named by its compute API.
  ASSERT_EQ(topo.gpus.size(), 1u) << describe(topo);
  EXPECT_EQ(topo.gpus[0].name, "cuda0");
  EXPECT_EQ(topo.gpus[0].numaNode, 1);
  EXPECT_EQ(topo.gpus[0].localCpus, (std::vector<int>{2, 3}));

  // A rank on package 1 uses the ConnectX's verbs device; one on package 0 the Ethernet port;
  // one that may run anywhere overlaps all equally and prefers RDMA.
  EXPECT_EQ(nearestNic(topo.nics, {2, 3}), mlx);
  EXPECT_EQ(nearestNic(topo.nics, {0}), eth0);
  EXPECT_EQ(nearestNic(topo.nics, topo.processCpus), mlx);
  // Unbound on this machine: the progress thread goes next to the NIC.
  EXPECT_EQ(progressThreadCpus(topo, mlx), (std::vector<int>{2, 3}));

  std::string line = describe(topo);
  EXPECT_NE(line.find("2 packages, 4 cores / 4 PUs, 2 NUMA nodes, process not bound"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("mlx5_0 (rdma, numa 1, cpus 2-3)"), std::string::npos) << line;
  EXPECT_NE(line.find("GPUs: cuda0 (numa 1, cpus 2-3)"), std::string::npos) << line;
}

TEST(LocalTopology, XmlWithoutIo) {
#ifndef PRIOCCL_HAVE_HWLOC
  GTEST_SKIP() << "built without hwloc: no XML topologies";
#endif
  LocalTopology topo = discoverLocalTopologyFromXml(kNoIoXml);
  ASSERT_TRUE(topo.discovered) << topo.source;
  EXPECT_EQ(topo.packages, 1);
  EXPECT_EQ(topo.cores, 2);
  EXPECT_EQ(topo.pus, 4);
  EXPECT_EQ(topo.numaNodes, 1);
  EXPECT_TRUE(topo.nics.empty());
  EXPECT_TRUE(topo.gpus.empty());
  EXPECT_EQ(nearestNic(topo.nics, topo.processCpus), nullptr);
  EXPECT_TRUE(progressThreadCpus(topo, nullptr).empty());
  EXPECT_NE(describe(topo).find("NICs: none, GPUs: none"), std::string::npos) << describe(topo);
}

// hwloc's own override: the real entry point on a synthetic machine, which has no I/O devices.
TEST(LocalTopology, SyntheticFromTheEnvironment) {
#ifndef PRIOCCL_HAVE_HWLOC
  GTEST_SKIP() << "built without hwloc: HWLOC_SYNTHETIC means nothing";
#endif
  ScopedEnv synthetic("HWLOC_SYNTHETIC", "node:2 core:2 pu:1");
  LocalTopology topo = discoverLocalTopology();
  ASSERT_TRUE(topo.discovered) << topo.source;
  EXPECT_NE(topo.source.find("not this system"), std::string::npos) << topo.source;
  EXPECT_EQ(topo.numaNodes, 2);
  EXPECT_EQ(topo.cores, 4);
  EXPECT_EQ(topo.pus, 4);
  EXPECT_TRUE(topo.nics.empty());
  EXPECT_TRUE(topo.gpus.empty());
  EXPECT_FALSE(topo.processCpus.empty());  // still this process's real binding
  EXPECT_TRUE(progressThreadCpus(topo, nearestNic(topo.nics, topo.processCpus)).empty());
}

TEST(LocalTopology, BrokenXmlFallsBack) {
  LocalTopology topo = discoverLocalTopologyFromXml("<topology version=\"2.0\"><object");
  EXPECT_FALSE(topo.discovered);
  EXPECT_FALSE(topo.source.empty());
  EXPECT_EQ(topo.pus, sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_EQ(topo.cores, topo.pus);
  EXPECT_EQ(topo.numaNodes, 1);
  EXPECT_TRUE(topo.nics.empty());
  EXPECT_TRUE(topo.gpus.empty());
  EXPECT_FALSE(topo.processCpus.empty());
  EXPECT_FALSE(describe(topo).empty());
}

// ---- nearestNic ----

TEST(NearestNic, MostOverlapWins) {
  std::vector<Nic> nics = {nic("mlx5_0", true, {0, 1, 2, 3}), nic("mlx5_1", true, {4, 5, 6, 7})};
  EXPECT_EQ(nearestNic(nics, {5, 6})->name, "mlx5_1");
  EXPECT_EQ(nearestNic(nics, {1})->name, "mlx5_0");
  EXPECT_EQ(nearestNic(nics, {3, 4, 5})->name, "mlx5_1");     // 2 of 3 CPUs near mlx5_1
  EXPECT_EQ(nearestNic(nics, {7, 6, 5, 0})->name, "mlx5_1");  // order does not matter
  // A plain NIC that is nearer beats an RDMA one further away.
  nics.push_back(nic("eth0", false, {8, 9}));
  EXPECT_EQ(nearestNic(nics, {8, 9})->name, "eth0");
}

TEST(NearestNic, TiesPreferRdmaThenTheLowerName) {
  std::vector<Nic> nics = {nic("eth0", false, {0, 1}), nic("mlx5_1", true, {0, 1}),
                           nic("mlx5_0", true, {0, 1})};
  EXPECT_EQ(nearestNic(nics, {0})->name, "mlx5_0");
  EXPECT_EQ(nearestNic(nics, {5})->name, "mlx5_0");  // no overlap anywhere: still a tie
  EXPECT_EQ(nearestNic(nics, {})->name, "mlx5_0");
  std::vector<Nic> plain = {nic("eth1", false, {}), nic("eth0", false, {})};  // locality unknown
  EXPECT_EQ(nearestNic(plain, {0, 1})->name, "eth0");
}

TEST(NearestNic, NoneWithoutNics) {
  EXPECT_EQ(nearestNic({}, {0, 1}), nullptr);
}

// ---- progressThreadCpus ----

LocalTopology machine(int pus, std::vector<int> processCpus) {
  LocalTopology topo;
  topo.discovered = true;
  topo.pus = topo.cores = pus;
  topo.numaNodes = 2;
  topo.processCpus = std::move(processCpus);
  topo.processBound = static_cast<int>(topo.processCpus.size()) < pus;
  return topo;
}

TEST(ProgressThreadCpus, BoundProcessStaysInsideItsBinding) {
  Nic near = nic("mlx5_0", true, {0, 1, 2, 3}, 0);
  // Bound to 2-5: only the part of the binding near the NIC.
  LocalTopology topo = machine(8, {2, 3, 4, 5});
  EXPECT_EQ(progressThreadCpus(topo, &near), (std::vector<int>{2, 3}));
  // Bound inside the NIC's CPUs already: nothing narrower to choose.
  topo = machine(8, {0, 1});
  EXPECT_TRUE(progressThreadCpus(topo, &near).empty());
  // Bound away from the NIC: never a CPU outside the binding.
  topo = machine(8, {6, 7});
  EXPECT_TRUE(progressThreadCpus(topo, &near).empty());
  // NIC locality unknown.
  Nic unknown = nic("eth0", false, {});
  topo = machine(8, {2, 3, 4, 5});
  EXPECT_TRUE(progressThreadCpus(topo, &unknown).empty());
  EXPECT_TRUE(progressThreadCpus(topo, nullptr).empty());
  // Whatever the NIC, the choice is within the binding.
  for (const std::vector<int>& local :
       {std::vector<int>{0, 1, 2, 3}, std::vector<int>{4, 5, 6, 7}, std::vector<int>{3, 6}}) {
    Nic n = nic("x", false, local);
    for (int cpu : progressThreadCpus(topo, &n))
      EXPECT_TRUE(cpu >= 2 && cpu <= 5) << cpu << " is outside the binding";
  }
}

TEST(ProgressThreadCpus, UnboundProcessOnlyNearAKnownNic) {
  LocalTopology topo = machine(8, {0, 1, 2, 3, 4, 5, 6, 7});
  ASSERT_FALSE(topo.processBound);
  Nic near = nic("mlx5_1", true, {4, 5, 6, 7}, 1);
  EXPECT_EQ(progressThreadCpus(topo, &near), (std::vector<int>{4, 5, 6, 7}));
  // A NIC near every CPU (one NUMA node, or unknown placement): no binding is invented.
  Nic everywhere = nic("eth0", false, {0, 1, 2, 3, 4, 5, 6, 7});
  EXPECT_TRUE(progressThreadCpus(topo, &everywhere).empty());
  Nic unknown = nic("eth0", false, {});
  EXPECT_TRUE(progressThreadCpus(topo, &unknown).empty());
  EXPECT_TRUE(progressThreadCpus(topo, nullptr).empty());
}

// ---- bindThread and cpuListText ----

TEST(BindThread, ToTheProcessCpusAndNotBeyondTheMachine) {
  LocalTopology topo = discoverLocalTopology();
  ASSERT_FALSE(topo.processCpus.empty());
  std::string why;
  EXPECT_TRUE(bindThread(pthread_self(), topo.processCpus, &why)) << why;

  why.clear();
  EXPECT_FALSE(bindThread(pthread_self(), {100000}, &why));
  EXPECT_FALSE(why.empty());
  why.clear();
  EXPECT_FALSE(bindThread(pthread_self(), {}, &why));
  EXPECT_FALSE(why.empty());
  why.clear();
  EXPECT_FALSE(bindThread(pthread_self(), {-1}, &why));
  EXPECT_FALSE(why.empty());
  EXPECT_FALSE(bindThread(pthread_self(), {100000}, nullptr));  // no reason asked for
  // The failures left the binding as it was.
  EXPECT_TRUE(bindThread(pthread_self(), topo.processCpus, &why)) << why;
}

TEST(CpuListText, Ranges) {
  EXPECT_EQ(cpuListText({}), "");
  EXPECT_EQ(cpuListText({5}), "5");
  EXPECT_EQ(cpuListText({0, 1, 2, 3, 8}), "0-3,8");
  EXPECT_EQ(cpuListText({0, 1}), "0-1");
  EXPECT_EQ(cpuListText({0, 2, 4}), "0,2,4");
  EXPECT_EQ(cpuListText({1, 2, 3, 7, 8, 9, 12}), "1-3,7-9,12");
  EXPECT_EQ(cpuListText({1, 1, 2}), "1-2");
}

}  // namespace

// ---- Placement (topology/placement.h): the rule over a described machine.

TEST(Placement, NearestDeviceForUcxOnlyWhenThereIsAChoice) {
#ifndef PRIOCCL_HAVE_HWLOC
  GTEST_SKIP() << "built without hwloc: no XML topologies";
#endif
  LocalTopology topo = discoverLocalTopologyFromXml(kTwoSocketXml);
  prioccl::Placement p = prioccl::choosePlacement(true, nullptr, topo);
  EXPECT_EQ(p.nic, "mlx5_0");
  EXPECT_EQ(p.ucxNetDevices, "mlx5_0:1");  // UCX names a verbs device by its port
  EXPECT_EQ(p.progressCpus, (std::vector<int>{2, 3}));
  EXPECT_NE(p.describe().find("UCX_NET_DEVICES=mlx5_0:1"), std::string::npos) << p.describe();
  EXPECT_NE(p.describe().find("progress thread on cpus 2-3"), std::string::npos) << p.describe();

  // The user's UCX_NET_DEVICES wins; PRIOCCL_PLACEMENT=0 leaves both choices alone.
  p = prioccl::choosePlacement(true, "eth0", topo);
  EXPECT_EQ(p.ucxNetDevices, "");
  EXPECT_EQ(p.progressCpus, (std::vector<int>{2, 3}));
  p = prioccl::choosePlacement(false, nullptr, topo);
  EXPECT_EQ(p.ucxNetDevices, "");
  EXPECT_TRUE(p.progressCpus.empty());
  EXPECT_NE(p.describe().find("PRIOCCL_PLACEMENT=0"), std::string::npos) << p.describe();

  // A rank bound to package 0 takes the Ethernet port there, by name (no port suffix).
  topo.processCpus = {0, 1};
  topo.processBound = true;
  p = prioccl::choosePlacement(true, nullptr, topo);
  EXPECT_EQ(p.ucxNetDevices, "eth0");
  EXPECT_TRUE(p.progressCpus.empty()) << "already inside the rank's binding, nothing narrower";
}

TEST(Placement, NothingFoundChangesNothing) {
  LocalTopology topo;  // what a machine without hwloc or devices gives
  topo.pus = topo.cores = 2;
  topo.processCpus = {0, 1};
  prioccl::Placement p = prioccl::choosePlacement(true, nullptr, topo);
  EXPECT_EQ(p.nic, "");
  EXPECT_EQ(p.ucxNetDevices, "");
  EXPECT_TRUE(p.progressCpus.empty());
  EXPECT_NE(p.describe().find("NIC none found"), std::string::npos) << p.describe();
  // This machine, through the cached discovery: whatever it finds, a line comes out.
  EXPECT_FALSE(prioccl::choosePlacement(true, nullptr).describe().empty());
}
