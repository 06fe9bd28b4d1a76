// The C ABI: a thin wrapper over the C++ API. Handles are opaque ids looked up in tables, never
// raw pointers, so a destroyed communicator or an already-waited request is detected and
// reported as priocclInvalidUsage instead of being dereferenced.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "api/c_api_support.h"
#include "api/op_rules.h"
#include "api/params.h"
#include "api/shape.h"
#include "common/error.h"
#include "core/op.h"
#include "device/device_memory.h"
#include "factory.h"

namespace prioccl {
namespace {

using capi::comms;
using capi::guarded;
using capi::lookup;

thread_local std::string t_returnedError;  // backing store of priocclGetLastError's result
constexpr const char* kDeadRequest =
    "is not live (already released by priocclWait, or never created)";

capi::HandleTable<Request, capi::kRequestHandle>& requests() {
  static capi::HandleTable<Request, capi::kRequestHandle> table;
  return table;
}

// The body of every async entry point: `submit(communicator)` returns the op's Request, which
// gets a handle. `op`: priocclSum for ops without a reduction.
template <typename Submit>
void submitAsync(priocclComm_t comm, priocclRequest_t* request, const priocclDataType_t& datatype,
                 const priocclRedOp_t& op, Submit&& submit) {
  if (!request) detail::fail(priocclInvalidArgument, "request is NULL");
  *request = nullptr;
  detail::validateEnums(datatype, op);  // before any C++ load of possibly invalid enum values
  Communicator c = lookup(comm);
  *request = reinterpret_cast<priocclRequest_t>(requests().add(submit(c)));
}

// A named entry point's key: NULL fails the call, leaving *request NULL as every failure does.
void requireKey(const char* key, priocclRequest_t* request) {
  if (request) *request = nullptr;
  if (!key) detail::fail(priocclInvalidArgument, "key is NULL");
}

priocclComm_t toHandle(uintptr_t id) {
  return reinterpret_cast<priocclComm_t>(id);
}

}  // namespace
}  // namespace prioccl

using namespace prioccl;

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

priocclResult_t priocclAllReduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                      priocclDataType_t datatype, priocclRedOp_t op, int priority,
                                      priocclComm_t comm, priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, datatype, op, [&](Communicator& c) {
      return c.allReduceAsync(sendbuf, recvbuf, count, datatype, op, priority);
    });
  });
}

priocclResult_t priocclAllReduceNamedAsync(const void* sendbuf, void* recvbuf, size_t count,
                                           priocclDataType_t datatype, priocclRedOp_t op,
                                           int priority, const char* key, priocclComm_t comm,
                                           priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    requireKey(key, request);
    submitAsync(comm, request, datatype, op, [&](Communicator& c) {
      return c.allReduceAsync(sendbuf, recvbuf, count, datatype, op, priority, key);
    });
  });
}

priocclResult_t priocclBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count,
                                      priocclDataType_t datatype, int root, int priority,
                                      priocclComm_t comm, priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.broadcastAsync(sendbuff, recvbuff, count, datatype, root, priority);
    });
  });
}

priocclResult_t priocclBroadcastNamedAsync(const void* sendbuff, void* recvbuff, size_t count,
                                           priocclDataType_t datatype, int root, int priority,
                                           const char* key, priocclComm_t comm,
                                           priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    requireKey(key, request);
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.broadcastAsync(sendbuff, recvbuff, count, datatype, root, priority, key);
    });
  });
}

priocclResult_t priocclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                 priocclDataType_t datatype, int root, priocclComm_t comm) {
  return guarded(__func__, comm, [&] {
    detail::validateEnums(datatype, priocclSum);
    lookup(comm).broadcast(sendbuff, recvbuff, count, datatype, root);
  });
}

priocclResult_t priocclReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                                   priocclDataType_t datatype, priocclRedOp_t op, int root,
                                   int priority, priocclComm_t comm, priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, datatype, op, [&](Communicator& c) {
      return c.reduceAsync(sendbuff, recvbuff, count, datatype, op, root, priority);
    });
  });
}

priocclResult_t priocclReduceNamedAsync(const void* sendbuff, void* recvbuff, size_t count,
                                        priocclDataType_t datatype, priocclRedOp_t op, int root,
                                        int priority, const char* key, priocclComm_t comm,
                                        priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    requireKey(key, request);
    submitAsync(comm, request, datatype, op, [&](Communicator& c) {
      return c.reduceAsync(sendbuff, recvbuff, count, datatype, op, root, priority, key);
    });
  });
}

priocclResult_t priocclReduce(const void* sendbuff, void* recvbuff, size_t count,
                              priocclDataType_t datatype, priocclRedOp_t op, int root,
                              priocclComm_t comm) {
  return guarded(__func__, comm, [&] {
    detail::validateEnums(datatype, op);
    lookup(comm).reduce(sendbuff, recvbuff, count, datatype, op, root);
  });
}

priocclResult_t priocclAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                      priocclDataType_t datatype, int priority, priocclComm_t comm,
                                      priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.allGatherAsync(sendbuff, recvbuff, sendcount, datatype, priority);
    });
  });
}

priocclResult_t priocclAllGatherNamedAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                           priocclDataType_t datatype, int priority,
                                           const char* key, priocclComm_t comm,
                                           priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    requireKey(key, request);
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.allGatherAsync(sendbuff, recvbuff, sendcount, datatype, priority, key);
    });
  });
}

priocclResult_t priocclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 priocclDataType_t datatype, priocclComm_t comm) {
  return guarded(__func__, comm, [&] {
    detail::validateEnums(datatype, priocclSum);
    lookup(comm).allGather(sendbuff, recvbuff, sendcount, datatype);
  });
}

priocclResult_t priocclReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount,
                                          priocclDataType_t datatype, priocclRedOp_t op,
                                          int priority, priocclComm_t comm,
                                          priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, datatype, op, [&](Communicator& c) {
      return c.reduceScatterAsync(sendbuff, recvbuff, recvcount, datatype, op, priority);
    });
  });
}

priocclResult_t priocclReduceScatterNamedAsync(const void* sendbuff, void* recvbuff,
                                               size_t recvcount, priocclDataType_t datatype,
                                               priocclRedOp_t op, int priority, const char* key,
                                               priocclComm_t comm, priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    requireKey(key, request);
    submitAsync(comm, request, datatype, op, [&](Communicator& c) {
      return c.reduceScatterAsync(sendbuff, recvbuff, recvcount, datatype, op, priority, key);
    });
  });
}

priocclResult_t priocclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     priocclDataType_t datatype, priocclRedOp_t op,
                                     priocclComm_t comm) {
  return guarded(__func__, comm, [&] {
    detail::validateEnums(datatype, op);
    lookup(comm).reduceScatter(sendbuff, recvbuff, recvcount, datatype, op);
  });
}

priocclResult_t priocclAllGatherVAsync(const void* sendbuff, void* recvbuff,
                                       const size_t* recvcounts, const size_t* displs,
                                       priocclDataType_t datatype, int priority, priocclComm_t comm,
                                       priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.allGatherVAsync(sendbuff, recvbuff, recvcounts, displs, datatype, priority);
    });
  });
}

priocclResult_t priocclAllGatherVNamedAsync(const void* sendbuff, void* recvbuff,
                                            const size_t* recvcounts, const size_t* displs,
                                            priocclDataType_t datatype, int priority,
                                            const char* key, priocclComm_t comm,
                                            priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    requireKey(key, request);
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.allGatherVAsync(sendbuff, recvbuff, recvcounts, displs, datatype, priority, key);
    });
  });
}

priocclResult_t priocclAllGatherV(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                  const size_t* displs, priocclDataType_t datatype,
                                  priocclComm_t comm) {
  return guarded(__func__, comm, [&] {
    detail::validateEnums(datatype, priocclSum);
    lookup(comm).allGatherV(sendbuff, recvbuff, recvcounts, displs, datatype);
  });
}

priocclResult_t priocclReduceScatterVAsync(const void* sendbuff, void* recvbuff,
                                           const size_t* recvcounts, priocclDataType_t datatype,
                                           priocclRedOp_t op, int priority, priocclComm_t comm,
                                           priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, datatype, op, [&](Communicator& c) {
      return c.reduceScatterVAsync(sendbuff, recvbuff, recvcounts, datatype, op, priority);
    });
  });
}

priocclResult_t priocclReduceScatterVNamedAsync(const void* sendbuff, void* recvbuff,
                                                const size_t* recvcounts,
                                                priocclDataType_t datatype, priocclRedOp_t op,
                                                int priority, const char* key, priocclComm_t comm,
                                                priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    requireKey(key, request);
    submitAsync(comm, request, datatype, op, [&](Communicator& c) {
      return c.reduceScatterVAsync(sendbuff, recvbuff, recvcounts, datatype, op, priority, key);
    });
  });
}

priocclResult_t priocclReduceScatterV(const void* sendbuff, void* recvbuff,
                                      const size_t* recvcounts, priocclDataType_t datatype,
                                      priocclRedOp_t op, priocclComm_t comm) {
  return guarded(__func__, comm, [&] {
    detail::validateEnums(datatype, op);
    lookup(comm).reduceScatterV(sendbuff, recvbuff, recvcounts, datatype, op);
  });
}

priocclResult_t priocclAllToAllVAsync(const void* sendbuff, const size_t* sendcounts,
                                      const size_t* sdispls, void* recvbuff,
                                      const size_t* recvcounts, const size_t* rdispls,
                                      priocclDataType_t datatype, int priority, priocclComm_t comm,
                                      priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.allToAllVAsync(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls,
                              datatype, priority);
    });
  });
}

priocclResult_t priocclAllToAllVNamedAsync(const void* sendbuff, const size_t* sendcounts,
                                           const size_t* sdispls, void* recvbuff,
                                           const size_t* recvcounts, const size_t* rdispls,
                                           priocclDataType_t datatype, int priority,
                                           const char* key, priocclComm_t comm,
                                           priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    requireKey(key, request);
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.allToAllVAsync(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls,
                              datatype, priority, key);
    });
  });
}

priocclResult_t priocclAllToAllV(const void* sendbuff, const size_t* sendcounts,
                                 const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
                                 const size_t* rdispls, priocclDataType_t datatype,
                                 priocclComm_t comm) {
  return guarded(__func__, comm, [&] {
    detail::validateEnums(datatype, priocclSum);
    lookup(comm).allToAllV(sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, datatype);
  });
}

priocclResult_t priocclAllToAllAsync(const void* sendbuff, void* recvbuff, size_t count,
                                     priocclDataType_t datatype, int priority, priocclComm_t comm,
                                     priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.allToAllAsync(sendbuff, recvbuff, count, datatype, priority);
    });
  });
}

priocclResult_t priocclAllToAllNamedAsync(const void* sendbuff, void* recvbuff, size_t count,
                                          priocclDataType_t datatype, int priority, const char* key,
                                          priocclComm_t comm, priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    requireKey(key, request);
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.allToAllAsync(sendbuff, recvbuff, count, datatype, priority, key);
    });
  });
}

priocclResult_t priocclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                priocclDataType_t datatype, priocclComm_t comm) {
  return guarded(__func__, comm, [&] {
    detail::validateEnums(datatype, priocclSum);
    lookup(comm).allToAll(sendbuff, recvbuff, count, datatype);
  });
}

priocclResult_t priocclBarrierAsync(int priority, priocclComm_t comm, priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, priocclUint8, priocclSum,
                [&](Communicator& c) { return c.barrierAsync(priority); });
  });
}

priocclResult_t priocclBarrierNamedAsync(int priority, const char* key, priocclComm_t comm,
                                         priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    requireKey(key, request);
    submitAsync(comm, request, priocclUint8, priocclSum,
                [&](Communicator& c) { return c.barrierAsync(priority, key); });
  });
}

priocclResult_t priocclBarrier(priocclComm_t comm) {
  return guarded(__func__, comm, [&] { lookup(comm).barrier(); });
}

priocclResult_t priocclTimelineStart(priocclComm_t comm, const char* path) {
  return guarded(__func__, comm, [&] {
    if (!path) detail::fail(priocclInvalidArgument, "path is NULL");
    lookup(comm).startTimeline(path);
  });
}

priocclResult_t priocclTimelineStop(priocclComm_t comm) {
  return guarded(__func__, comm, [&] { lookup(comm).stopTimeline(); });
}

priocclResult_t priocclJoin(priocclComm_t comm, int* lastRank) {
  return guarded(__func__, comm, [&] {
    if (!lastRank) detail::fail(priocclInvalidArgument, "lastRank is NULL");
    *lastRank = lookup(comm).join();
  });
}

priocclResult_t priocclShapeNext(const int64_t* dims, int ndims) {
  return guarded(__func__, nullptr, [&] { detail::shape::setNext(dims, ndims); });
}

priocclResult_t priocclBcast(void* buff, size_t count, priocclDataType_t datatype, int root,
                             priocclComm_t comm) {
  return priocclBroadcast(buff, buff, count, datatype, root, comm);
}

priocclResult_t priocclSendAsync(const void* buf, size_t count, priocclDataType_t datatype,
                                 int peer, int tag, int priority, priocclComm_t comm,
                                 priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.sendAsync(buf, count, datatype, peer, tag, priority);
    });
  });
}

priocclResult_t priocclRecvAsync(void* buf, size_t count, priocclDataType_t datatype, int peer,
                                 int tag, int priority, priocclComm_t comm,
                                 priocclRequest_t* request) {
  return guarded(__func__, comm, [&] {
    submitAsync(comm, request, datatype, priocclSum, [&](Communicator& c) {
      return c.recvAsync(buf, count, datatype, peer, tag, priority);
    });
  });
}

priocclResult_t priocclGetCounters(priocclComm_t comm, priocclCounters_t* counters) {
  return guarded(__func__, comm, [&] {
    if (!counters) detail::fail(priocclInvalidArgument, "counters is NULL");
    *counters = lookup(comm).counters();
  });
}

priocclResult_t priocclAllReduce(const void* sendbuf, void* recvbuf, size_t count,
                                 priocclDataType_t datatype, priocclRedOp_t op,
                                 priocclComm_t comm) {
  return guarded(__func__, comm, [&] {
    detail::validateEnums(datatype, op);  // before any C++ load of possibly invalid enum values
    lookup(comm).allReduce(sendbuf, recvbuf, count, datatype, op);
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
