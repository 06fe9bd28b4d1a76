// Which DeviceMemory the process has (device_memory.h).
#include "device/device_memory.h"

#include <link.h>

#include <atomic>
#include <cstddef>
#include <cstring>

#include "common/error.h"

namespace prioccl::device {

#ifdef PRIOCCL_HAVE_CUDA
DeviceMemory* cudaMemory();  // cuda_memory.cpp: null when the CUDA runtime cannot be used
#endif

namespace {

std::atomic<DeviceMemory*> g_testing{nullptr};

#ifdef PRIOCCL_HAVE_CUDA
// Whether the CUDA driver is loaded in this process. A device pointer exists only after the
// program initialised CUDA, which loads the driver; until then no buffer needs asking about, and
// loading the CUDA runtime (or initialising a device) on a CPU-only job would be a cost of its
// own. Asked per op, so it must be cheap: the loader's count of loaded objects (read from the
// first object, ~10 ns) tells whether anything was loaded since the last look, and only then are
// the objects' names searched. (dlopen with RTLD_NOLOAD costs ~20 us: it searches the library
// path.) Once loaded, the driver stays, so that answer is kept.
int readLoadCount(dl_phdr_info* info, size_t size, void* out) {
  if (size >= offsetof(dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
    *static_cast<unsigned long long*>(out) = info->dlpi_adds;
  return 1;  // the count is the same in every object's entry: one is enough
}

int findDriver(dl_phdr_info* info, size_t, void* found) {
  const char* name = info->dlpi_name ? info->dlpi_name : "";
  const char* base = std::strrchr(name, '/');
  base = base ? base + 1 : name;
  if (std::strncmp(base, "libcuda.so", 10) == 0) *static_cast<bool*>(found) = true;
  return 0;
}

bool driverLoaded() {
  static std::atomic<bool> loaded{false};
  static std::atomic<unsigned long long> seen{~0ULL};
  if (loaded.load(std::memory_order_relaxed)) return true;
  unsigned long long count = 0;
  dl_iterate_phdr(readLoadCount, &count);
  if (count == seen.load(std::memory_order_relaxed)) return false;
  bool found = false;
  dl_iterate_phdr(findDriver, &found);
  seen.store(count, std::memory_order_relaxed);
  if (found) loaded.store(true, std::memory_order_relaxed);
  return found;
}
#endif

}  // namespace

DeviceMemory* current() {
  if (DeviceMemory* t = g_testing.load(std::memory_order_acquire)) return t;
#ifdef PRIOCCL_HAVE_CUDA
  if (driverLoaded()) return cudaMemory();
#endif
  return nullptr;
}

void requireHost(const void* p, const char* what, const char* who) {
  DeviceMemory* memory = current();
  if (p && memory && memory->isDevice(p))
    detail::fail(priocclInvalidArgument, who, ": ", what,
                 " is device memory; the training modes compute on the host and take host "
                 "buffers (the collectives take device buffers)");
}

void copyAny(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  DeviceMemory* memory = current();
  if (memory && (memory->isDevice(dst) || memory->isDevice(src)))
    memory->copy(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

namespace {
thread_local ThreadStream t_stream;
}

void setStream(const ThreadStream& s) {
  t_stream = s;
}
const ThreadStream& stream() {
  return t_stream;
}

void setForTesting(DeviceMemory* memory) {
  g_testing.store(memory, std::memory_order_release);
}

}  // namespace prioccl::device
