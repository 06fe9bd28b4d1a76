// The C ABI's op entry points (collectives, send/recv, barrier, join, timeline, counters): each
// checks what C alone can (NULL handles and outputs, enum values before C++ loads them) and calls
// the C++ API, whose request gets a handle (c_api.cpp has the handles' lifecycle).
#include <cstddef>
#include <cstdint>
#include <string>

#include "api/c_api_support.h"
#include "api/op_rules.h"
#include "api/shape.h"
#include "common/error.h"

namespace prioccl {
namespace {

using capi::guarded;
using capi::lookup;
using capi::requireKey;
using capi::submitAsync;

}  // namespace
}  // namespace prioccl

using namespace prioccl;

extern "C" {

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

}  // extern "C"
