// priocclGetConstant: prioccl.h's enumerators and integer flags by name, for bindings that cannot
// read the header (the Python package reads its data types, reduction ops and flags here rather
// than restating them). python.constants checks that it
// names every one (a name not in the header does not compile).
#include <cstring>

#include "api/c_api_support.h"
#include "prioccl/prioccl.h"

namespace {

struct Constant {
  const char* name;
  int value;
};

#define PRIOCCL_CONSTANT(x) \
  { #x, static_cast < int>(x) }
constexpr Constant kConstants[] = {
    // priocclResult_t
    PRIOCCL_CONSTANT(priocclSuccess),
    PRIOCCL_CONSTANT(priocclUnhandledCudaError),
    PRIOCCL_CONSTANT(priocclSystemError),
    PRIOCCL_CONSTANT(priocclInternalError),
    PRIOCCL_CONSTANT(priocclInvalidArgument),
    PRIOCCL_CONSTANT(priocclInvalidUsage),
    PRIOCCL_CONSTANT(priocclRemoteError),
    PRIOCCL_CONSTANT(priocclInProgress),
    PRIOCCL_CONSTANT(priocclTimeout),
    PRIOCCL_CONSTANT(priocclNumResults),
    // priocclDataType_t
    PRIOCCL_CONSTANT(priocclInt8),
    PRIOCCL_CONSTANT(priocclChar),
    PRIOCCL_CONSTANT(priocclUint8),
    PRIOCCL_CONSTANT(priocclInt32),
    PRIOCCL_CONSTANT(priocclInt),
    PRIOCCL_CONSTANT(priocclUint32),
    PRIOCCL_CONSTANT(priocclInt64),
    PRIOCCL_CONSTANT(priocclUint64),
    PRIOCCL_CONSTANT(priocclFloat16),
    PRIOCCL_CONSTANT(priocclHalf),
    PRIOCCL_CONSTANT(priocclFloat32),
    PRIOCCL_CONSTANT(priocclFloat),
    PRIOCCL_CONSTANT(priocclFloat64),
    PRIOCCL_CONSTANT(priocclDouble),
    PRIOCCL_CONSTANT(priocclBfloat16),
    PRIOCCL_CONSTANT(priocclNumTypes),
    // priocclRedOp_t
    PRIOCCL_CONSTANT(priocclSum),
    PRIOCCL_CONSTANT(priocclProd),
    PRIOCCL_CONSTANT(priocclMax),
    PRIOCCL_CONSTANT(priocclMin),
    PRIOCCL_CONSTANT(priocclAvg),
    PRIOCCL_CONSTANT(priocclNumOps),
    // priocclSchedule_t
    PRIOCCL_CONSTANT(priocclSchedulePriority),
    PRIOCCL_CONSTANT(priocclScheduleFifo),
    // priocclAlgorithm_t
    PRIOCCL_CONSTANT(priocclAlgoAuto),
    PRIOCCL_CONSTANT(priocclAlgoRing),
    PRIOCCL_CONSTANT(priocclAlgoTree),
    PRIOCCL_CONSTANT(priocclAlgoRecursiveDoubling),
    PRIOCCL_CONSTANT(priocclAlgoHalvingDoubling),
    PRIOCCL_CONSTANT(priocclAlgoHierarchical),
    PRIOCCL_CONSTANT(priocclNumAlgos),
    // priocclTransport_t
    PRIOCCL_CONSTANT(priocclTransportMpi),
    PRIOCCL_CONSTANT(priocclTransportUcx),
    PRIOCCL_CONSTANT(priocclTransportMpiColl),
    PRIOCCL_CONSTANT(priocclTransportNccl),
    PRIOCCL_CONSTANT(priocclTransportTcp),
    PRIOCCL_CONSTANT(priocclTransportAuto),
    PRIOCCL_CONSTANT(priocclNumTransports),
    // priocclStalenessRule_t
    PRIOCCL_CONSTANT(priocclStalenessPaper),
    PRIOCCL_CONSTANT(priocclStalenessSchedule),
    // flags and versions
    PRIOCCL_CONSTANT(PRIOCCL_MAJOR),
    PRIOCCL_CONSTANT(PRIOCCL_MINOR),
    PRIOCCL_CONSTANT(PRIOCCL_PATCH),
    PRIOCCL_CONSTANT(PRIOCCL_VERSION_CODE),
    PRIOCCL_CONSTANT(PRIOCCL_FEATURE_UCX),
    PRIOCCL_CONSTANT(PRIOCCL_FEATURE_CUDA),
    PRIOCCL_CONSTANT(PRIOCCL_FEATURE_NCCL),
    PRIOCCL_CONSTANT(PRIOCCL_SPLIT_NOCOLOR),
    PRIOCCL_CONSTANT(PRIOCCL_SHRINK_TO_LIVE),
    PRIOCCL_CONSTANT(PRIOCCL_STREAM_HOLD),
    PRIOCCL_CONSTANT(PRIOCCL_UNIQUE_ID_BYTES),
    // (size_t)-1, which reads as -1
    PRIOCCL_CONSTANT(PRIOCCL_ROWS_FAILED),
};
#undef PRIOCCL_CONSTANT

}  // namespace

using prioccl::capi::guarded;

extern "C" priocclResult_t priocclGetConstant(const char* name, int* value) {
  return guarded(__func__, nullptr, [&] {
    if (!name) prioccl::detail::fail(priocclInvalidArgument, "name is NULL");
    if (!value) prioccl::detail::fail(priocclInvalidArgument, "value is NULL");
    for (const Constant& c : kConstants)
      if (std::strcmp(c.name, name) == 0) {
        *value = c.value;
        return;
      }
    prioccl::detail::fail(priocclInvalidArgument, "no constant named '", name,
                          "' in prioccl.h (names are the header's: priocclFloat32, priocclSum, "
                          "PRIOCCL_FEATURE_NCCL, ...)");
  });
}
