// The real DeviceMemory's selection (src/device/device_memory.cpp): nothing is asked while no GPU
// driver is in the process; once one is, the CUDA runtime is loaded and asked. Here the driver is
// the toolkit's stub (no GPU), so every CUDA call fails, and must fail cleanly, naming the call.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/dynamic_library.h"
#include "device/device_memory.h"
#include "prioccl/prioccl.hpp"

namespace {

// The runtime prioccl was built against comes before the other supported major, and both before
// the unversioned development link, which may name any version (issue 45, item 3).
TEST(CudaRuntimeNames, BuiltMajorFirstThenTheOtherThenUnversioned) {
  using prioccl::detail::cudaRuntimeNames;
  std::vector<std::string> n13 = cudaRuntimeNames(13), n12 = cudaRuntimeNames(12);
  ASSERT_GE(n13.size(), 3u);
  EXPECT_EQ(n13[0], "libcudart.so.13");
  EXPECT_EQ(n13[1], "libcudart.so.12");
  EXPECT_EQ(n13[2], "libcudart.so");
  ASSERT_GE(n12.size(), 3u);
  EXPECT_EQ(n12[0], "libcudart.so.12");
  EXPECT_EQ(n12[1], "libcudart.so.13");
  EXPECT_EQ(n12[2], "libcudart.so");
}

TEST(DeviceMemory, NoneWithoutADriver) {
  if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD))
    GTEST_SKIP() << "a CUDA driver is already loaded in this process";
  EXPECT_EQ(prioccl::device::current(), nullptr);
}

#ifdef PRIOCCL_TEST_CUDA_STUB
TEST(DeviceMemory, TheDriverTurnsDetectionOn) {
  if (!prioccl::device::current()) {
    void* stub = dlopen(PRIOCCL_TEST_CUDA_STUB, RTLD_NOW | RTLD_GLOBAL);
    ASSERT_NE(stub, nullptr) << dlerror();
  }
  prioccl::device::DeviceMemory* memory = prioccl::device::current();
  ASSERT_NE(memory, nullptr) << "the driver is loaded, yet no device memory is asked about";
  EXPECT_STREQ(memory->name(), "CUDA");
  std::vector<int> host(4);
  EXPECT_FALSE(memory->isDevice(host.data()));  // the stub's driver fails: not device memory
  EXPECT_FALSE(memory->isDevice(nullptr));
  try {
    memory->allocHost(1 << 20);
    ADD_FAILURE() << "cudaHostAlloc succeeded without a GPU";
  } catch (const prioccl::Error& e) {
    EXPECT_EQ(e.code(), priocclUnhandledCudaError);
    EXPECT_NE(std::string(e.what()).find("cudaHostAlloc of 1048576 bytes"), std::string::npos)
        << e.what();
  }
}
#endif

}  // namespace
