// Pins the C ABI's numeric values: result codes, data types and reduction ops equal NCCL's, so a
// value cast or stored by code ported from NCCL keeps its meaning (issue 20). Changing any of
// them is an ABI break and needs a new SONAME (CMakeLists.txt, PRIOCCL_ABI_VERSION).
#include <gtest/gtest.h>
#include <prioccl/prioccl.h>

#include <cstdio>
#include <type_traits>

#ifdef PRIOCCL_TEST_HAVE_NCCL_H
#include <nccl.h>
#endif

namespace {

// The values NCCL 2.x documents in nccl.h; checked against the real header below when present.
static_assert(priocclSuccess == 0 && priocclUnhandledCudaError == 1 && priocclSystemError == 2 &&
              priocclInternalError == 3 && priocclInvalidArgument == 4 &&
              priocclInvalidUsage == 5 && priocclRemoteError == 6 && priocclInProgress == 7);
static_assert(priocclTimeout == 8 && priocclNumResults == 9, "prioccl's own result past NCCL's");
static_assert(priocclInt8 == 0 && priocclChar == 0 && priocclUint8 == 1 && priocclInt32 == 2 &&
              priocclInt == 2 && priocclUint32 == 3 && priocclInt64 == 4 && priocclUint64 == 5 &&
              priocclFloat16 == 6 && priocclHalf == 6 && priocclFloat32 == 7 && priocclFloat == 7 &&
              priocclFloat64 == 8 && priocclDouble == 8 && priocclBfloat16 == 9 &&
              priocclNumTypes == 10);
static_assert(priocclSum == 0 && priocclProd == 1 && priocclMax == 2 && priocclMin == 3 &&
              priocclAvg == 4 && priocclNumOps == 5);
// The enums are int-sized, like NCCL's, so structs and ctypes declarations keep their layout.
static_assert(sizeof(priocclResult_t) == sizeof(int) && sizeof(priocclDataType_t) == sizeof(int) &&
              sizeof(priocclRedOp_t) == sizeof(int));

#ifdef PRIOCCL_TEST_HAVE_NCCL_H
#define SAME(p, n) static_assert(static_cast<int>(p) == static_cast<int>(n), #p " != " #n)
SAME(priocclSuccess, ncclSuccess);
SAME(priocclUnhandledCudaError, ncclUnhandledCudaError);
SAME(priocclSystemError, ncclSystemError);
SAME(priocclInternalError, ncclInternalError);
SAME(priocclInvalidArgument, ncclInvalidArgument);
SAME(priocclInvalidUsage, ncclInvalidUsage);
SAME(priocclRemoteError, ncclRemoteError);
SAME(priocclInProgress, ncclInProgress);
SAME(priocclInt8, ncclInt8);
SAME(priocclChar, ncclChar);
SAME(priocclUint8, ncclUint8);
SAME(priocclInt32, ncclInt32);
SAME(priocclInt, ncclInt);
SAME(priocclUint32, ncclUint32);
SAME(priocclInt64, ncclInt64);
SAME(priocclUint64, ncclUint64);
SAME(priocclFloat16, ncclFloat16);
SAME(priocclHalf, ncclHalf);
SAME(priocclFloat32, ncclFloat32);
SAME(priocclFloat, ncclFloat);
SAME(priocclFloat64, ncclFloat64);
SAME(priocclDouble, ncclDouble);
SAME(priocclBfloat16, ncclBfloat16);
SAME(priocclSum, ncclSum);
SAME(priocclProd, ncclProd);
SAME(priocclMax, ncclMax);
SAME(priocclMin, ncclMin);
SAME(priocclAvg, ncclAvg);
#undef SAME
#endif

TEST(Abi, ValuesAreNcclsAndEveryResultHasAString) {
  // The static_asserts above are the check; this keeps the error strings in step with the enum.
  for (int r = 0; r < priocclNumResults; ++r) {
    EXPECT_STRNE(priocclGetErrorString(static_cast<priocclResult_t>(r)), "unknown result code")
        << "result " << r;
  }
  EXPECT_STREQ(priocclGetErrorString(priocclNumResults), "unknown result code");
}

TEST(Abi, ComparedWithTheInstalledNcclHeader) {
#ifdef PRIOCCL_TEST_HAVE_NCCL_H
  // Compiling this file compared every value with nccl.h; report which NCCL it was.
  std::printf("compared with nccl.h %d.%d.%d\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  SUCCEED();
#else
  GTEST_SKIP() << "nccl.h not found at configure time: values checked against the documented "
                  "numbers only";
#endif
}

}  // namespace

// priocclGetBuildFeatures answers what CMake configured (PRIOCCL_TEST_FEATURES, from
// tests/CMakeLists.txt), and refuses a NULL pointer.
TEST(Abi, BuildFeaturesAreTheBuildsOwn) {
  int features = -1;
  ASSERT_EQ(priocclGetBuildFeatures(&features), priocclSuccess);
  EXPECT_EQ(features, PRIOCCL_TEST_FEATURES);
  EXPECT_EQ(priocclGetBuildFeatures(nullptr), priocclInvalidArgument);
}

// priocclGetNcclVersion (Horovod's nccl_built): a NCCL_VERSION_CODE of NCCL 2.x
// (major * 10000 + minor * 100 + patch since 2.9) exactly when the build has NCCL, else 0.
TEST(Abi, NcclVersionIsTheBuildsOwn) {
  int version = -1;
  ASSERT_EQ(priocclGetNcclVersion(&version), priocclSuccess);
  if (PRIOCCL_TEST_FEATURES & PRIOCCL_FEATURE_NCCL) {
    EXPECT_EQ(version / 10000, 2) << version;
    EXPECT_GE(version, 20900) << version;
  } else {
    EXPECT_EQ(version, 0);
  }
  EXPECT_EQ(priocclGetNcclVersion(nullptr), priocclInvalidArgument);
}
