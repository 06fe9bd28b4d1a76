// The C ABI: a thin wrapper over the C++ API. Handles are opaque ids looked up in tables, never
// raw pointers, so a destroyed communicator or an already-waited request is detected and
// reported as priocclInvalidUsage instead of being dereferenced.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "api/c_api_support.h"
#include "api/comm_impl.h"
#include "api/params.h"
#include "common/error.h"
#include "core/op.h"
#include "device/device_memory.h"
#include "factory.h"
#include "setup_cancel.h"  // priocclCommInitCancel

namespace prioccl {
namespace {

using capi::comms;
using capi::guarded;
using capi::kDeadRequest;
using capi::lookup;
using capi::requests;

thread_local std::string t_returnedError;  // backing store of priocclGetLastError's result

priocclComm_t toHandle(uintptr_t id) {
  return reinterpret_cast<priocclComm_t>(id);
}

}  // namespace
}  // namespace prioccl

using namespace prioccl;

namespace {
priocclResult_t initRank(const char* func, priocclComm_t* comm, int nranks,
                         const priocclUniqueId& commId, int rank, const priocclConfig_t* config) {
  return guarded(func, nullptr, [&] {
    if (!comm) detail::fail(priocclInvalidArgument, "comm is NULL");
    *comm = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks)
      detail::fail(priocclInvalidArgument, "rank ", rank, " is not in 0..", nranks - 1, " (nranks ",
                   nranks, ")");
    Config c = Config::fromEnv();
    if (config) detail::mergeCConfig(*config, c);
    UniqueId id;
    std::memcpy(id.bytes, commId.internal, sizeof id.bytes);
    *comm = toHandle(comms().add(Communicator::fromUniqueId(id, nranks, rank, c)));
  });
}
}  // namespace

extern "C" {

const char* priocclGetErrorString(priocclResult_t result) {
  switch (result) {
    case priocclSuccess:
      return "no error";
    case priocclUnhandledCudaError:
      return "unhandled CUDA error";
    case priocclSystemError:
      return "system error (MPI, network or memory failure)";
    case priocclInternalError:
      return "internal error (a bug in prioccl)";
    case priocclInvalidArgument:
      return "invalid argument";
    case priocclInvalidUsage:
      return "invalid usage";
    case priocclRemoteError:
      return "remote error (another rank failed or disagreed)";
    case priocclTimeout:
      return "timeout";
    case priocclInProgress:
      return "operation in progress";
    case priocclNumResults:
      break;
  }
  return "unknown result code";
}

// The newer of this thread's last failure and the communicator's (which includes failures of
// its ops found by the progress thread).
const char* priocclGetLastError(priocclComm_t comm) {
  Communicator c;
  uint64_t mySerial = 0, serial = 0;
  t_returnedError = capi::lastError(&mySerial);
  try {
    if (comm && comms().find(reinterpret_cast<uintptr_t>(comm), &c) && c.valid()) {
      std::string own = c.lastError(&serial);
      if (serial > mySerial) t_returnedError = own;
    }
  } catch (...) {  // destroyed meanwhile: this thread's record stands
  }
  return t_returnedError.c_str();
}

priocclResult_t priocclGetVersion(int* version) {
  return guarded(__func__, nullptr, [&] {
    if (!version) detail::fail(priocclInvalidArgument, "version is NULL");
    *version = PRIOCCL_VERSION_CODE;
  });
}

priocclResult_t priocclGetBuildFeatures(int* features) {
  return guarded(__func__, nullptr, [&] {
    if (!features) detail::fail(priocclInvalidArgument, "features is NULL");
    *features = prioccl::buildFeatures();
  });
}

priocclResult_t priocclGetNcclVersion(int* version) {
  return guarded(__func__, nullptr, [&] {
    if (!version) detail::fail(priocclInvalidArgument, "version is NULL");
    *version = prioccl::ncclHeaderVersion();
  });
}

priocclResult_t priocclCommInitMPI(priocclComm_t* comm, const void* mpiComm,
                                   const priocclConfig_t* config) {
  return guarded(__func__, nullptr, [&] {
    if (!comm) detail::fail(priocclInvalidArgument, "comm is NULL");
    *comm = nullptr;
    Config c = Config::fromEnv();
    if (config) detail::mergeCConfig(*config, c);  // the parameter table's C fields
    *comm = toHandle(comms().add(Communicator::fromMpi(mpiComm, c)));
  });
}

priocclResult_t priocclGetUniqueId(priocclUniqueId* uniqueId) {
  return guarded(__func__, nullptr, [&] {
    if (!uniqueId) detail::fail(priocclInvalidArgument, "uniqueId is NULL");
    UniqueId id = Communicator::uniqueId();
    static_assert(sizeof id.bytes == sizeof uniqueId->internal, "one id size");
    std::memcpy(uniqueId->internal, id.bytes, sizeof id.bytes);
  });
}

priocclResult_t priocclCommInitRankConfig(priocclComm_t* comm, int nranks, priocclUniqueId commId,
                                          int rank, const priocclConfig_t* config) {
  return initRank(__func__, comm, nranks, commId, rank, config);
}

priocclResult_t priocclCommInitRank(priocclComm_t* comm, int nranks, priocclUniqueId commId,
                                    int rank) {
  return initRank(__func__, comm, nranks, commId, rank, nullptr);
}

priocclResult_t priocclCommInitCancel(void) {
  return guarded(__func__, nullptr, [] { cancelSetups(); });
}

priocclResult_t priocclCommInitWorld(priocclComm_t* comm) {
  return priocclCommInitMPI(comm, nullptr, nullptr);
}

priocclResult_t priocclCommDestroy(priocclComm_t comm) {
  return guarded(__func__, nullptr, [&] {
    comms().release(comm, "comm", "is not a live communicator (already destroyed?)").destroy();
  });
}

priocclResult_t priocclCommAbort(priocclComm_t comm) {
  return guarded(__func__, comm, [&] { lookup(comm).abort(); });
}

priocclResult_t priocclCommSplit(priocclComm_t comm, int color, int key, priocclComm_t* newcomm) {
  return guarded(__func__, comm, [&] {
    Communicator c = lookup(comm);
    if (!newcomm) {
      // The split is collective: take part with a color that fails every rank, not only this one
      // (the others would wait in it forever).
      try {
        (void)c.split(INT_MIN, key);
      } catch (const Error&) {
      }
      detail::fail(priocclInvalidArgument, "newcomm is NULL");
    }
    *newcomm = nullptr;
    Communicator part = c.split(color, key);
    if (part.valid()) *newcomm = toHandle(comms().add(std::move(part)));
  });
}

priocclResult_t priocclCommShrinkConfig(priocclComm_t comm, const int* excludeRanks,
                                        int excludeCount, priocclComm_t* newcomm,
                                        const priocclConfig_t* config) {
  return guarded(__func__, comm, [&] {
    Communicator c = lookup(comm);
    if (!newcomm) detail::fail(priocclInvalidArgument, "newcomm is NULL");
    *newcomm = nullptr;
    const bool toLive = excludeCount == PRIOCCL_SHRINK_TO_LIVE;
    if (!toLive && (excludeCount < 0 || (excludeCount > 0 && !excludeRanks)))
      detail::fail(priocclInvalidArgument, "excludeRanks is NULL or excludeCount (", excludeCount,
                   ") is negative (and not PRIOCCL_SHRINK_TO_LIVE)");
    std::vector<int> excluded;
    if (!toLive) excluded.assign(excludeRanks, excludeRanks + excludeCount);
    Config merged = detail::CommAccess::of(c).requested();
    if (config) detail::mergeCConfig(*config, merged);
    Communicator part = toLive ? c.shrinkToLive(merged) : c.shrink(excluded, merged);
    *newcomm = toHandle(comms().add(std::move(part)));
  });
}

priocclResult_t priocclCommShrink(priocclComm_t comm, const int* excludeRanks, int excludeCount,
                                  priocclComm_t* newcomm) {
  return priocclCommShrinkConfig(comm, excludeRanks, excludeCount, newcomm, nullptr);
}

priocclResult_t priocclCommGetAsyncError(priocclComm_t comm, priocclResult_t* asyncError) {
  return guarded(__func__, comm, [&] {
    if (!asyncError) detail::fail(priocclInvalidArgument, "asyncError is NULL");
    *asyncError = lookup(comm).asyncError();
  });
}

priocclResult_t priocclCommRank(priocclComm_t comm, int* rank) {
  return guarded(__func__, comm, [&] {
    Communicator c = lookup(comm);
    if (!rank) detail::fail(priocclInvalidArgument, "rank is NULL");
    *rank = c.rank();
  });
}

priocclResult_t priocclCommSize(priocclComm_t comm, int* size) {
  return guarded(__func__, comm, [&] {
    Communicator c = lookup(comm);
    if (!size) detail::fail(priocclInvalidArgument, "size is NULL");
    *size = c.size();
  });
}

priocclResult_t priocclCommHostInfo(priocclComm_t comm, int* localRank, int* localSize, int* host,
                                    int* hosts, int* homogeneous) {
  return guarded(__func__, comm, [&] {
    HostInfo h = lookup(comm).hostInfo();
    if (localRank) *localRank = h.localRank;
    if (localSize) *localSize = h.localSize;
    if (host) *host = h.host;
    if (hosts) *hosts = h.hosts;
    if (homogeneous) *homogeneous = h.homogeneous ? 1 : 0;
  });
}

priocclResult_t priocclGroupStart() {
  return guarded(__func__, nullptr, [] { groupStart(); });
}

priocclResult_t priocclGroupEnd() {
  return guarded(__func__, nullptr, [] { groupEnd(); });
}

priocclResult_t priocclTest(priocclRequest_t request, int* done) {
  return guarded(__func__, nullptr, [&] {
    if (!done) detail::fail(priocclInvalidArgument, "done is NULL");
    Request r = requests().get(request, "request", kDeadRequest);
    *done = 0;
    std::string error;
    priocclResult_t status = r.status(&error);
    if (status == priocclInProgress) return;
    *done = 1;
    if (status != priocclSuccess) detail::raise(status, error);
  });
}

priocclResult_t priocclSetStream(void* stream, int flags) {
  return guarded(__func__, nullptr, [&] {
    if (flags & ~PRIOCCL_STREAM_HOLD)
      detail::fail(priocclInvalidArgument, "flags ", flags,
                   " has bits other than PRIOCCL_STREAM_HOLD (1)");
    prioccl::setStream(stream, (flags & PRIOCCL_STREAM_HOLD) != 0);
  });
}

priocclResult_t priocclGetStream(void** stream, int* flags) {
  return guarded(__func__, nullptr, [&] {
    const device::ThreadStream& s = device::stream();
    if (stream) *stream = s.stream;
    if (flags) *flags = s.holds ? PRIOCCL_STREAM_HOLD : 0;
  });
}

priocclResult_t priocclStreamWaitRequest(void* stream, priocclRequest_t request) {
  return guarded(__func__, nullptr,
                 [&] { requests().get(request, "request", kDeadRequest).streamWait(stream); });
}

priocclResult_t priocclWait(priocclRequest_t request) {
  return guarded(__func__, nullptr,
                 [&] { requests().release(request, "request", kDeadRequest).wait(); });
}

}  // extern "C"
