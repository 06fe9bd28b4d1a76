// The C ABI's op entry points (collectives, send/recv, barrier, join, timeline, counters). Each
// fills an op descriptor (api/op_rules.h) and hands it to one of three bodies below, which do
// the C ABI's part (the request handle, a named op's key, the enums checked before anything
// loads them) and pass it to the communicator (CommImpl::submit), as the C++ API does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "api/c_api_support.h"
#include "api/comm_impl.h"
#include "api/op_rules.h"
#include "api/shape.h"
#include "common/error.h"

namespace prioccl::capi {
namespace {

using detail::OpDesc;

// An async op: its Request gets a handle in *request (NULL on any failure).
priocclResult_t submitOp(const char* func, priocclComm_t comm, priocclRequest_t* request,
                         const OpDesc& d) {
  return guarded(func, comm, [&] {
    if (!request) detail::fail(priocclInvalidArgument, "request is NULL");
    *request = nullptr;
    detail::validateEnums(d.dtype, d.op);  // before the C++ side loads them as enums
    Request r = detail::CommAccess::of(lookup(comm)).submit(d);
    *request = reinterpret_cast<priocclRequest_t>(requests().add(std::move(r)));
  });
}

// A named async op: a NULL key fails the call, leaving *request NULL as every failure does.
priocclResult_t submitNamedOp(const char* func, priocclComm_t comm, priocclRequest_t* request,
                              const char* key, OpDesc d) {
  if (request) *request = nullptr;
  if (!key) return guarded(func, comm, [] { detail::fail(priocclInvalidArgument, "key is NULL"); });
  return submitOp(func, comm, request, detail::named(d, key));
}

// A blocking op: submitted and waited for (inside a group: at the group's end).
priocclResult_t runOp(const char* func, priocclComm_t comm, const OpDesc& d) {
  return guarded(func, comm, [&] {
    detail::validateEnums(d.dtype, d.op);
    detail::CommAccess::of(lookup(comm)).run(d);
  });
}

// A ragged op (api/ragged.h): its Request and its result get handles (both NULL on failure).
priocclResult_t submitRowsOp(const char* func, priocclComm_t comm, priocclRows_t* result,
                             priocclRequest_t* request, const OpDesc& d) {
  if (result) *result = nullptr;
  return guarded(func, comm, [&] {
    if (!request) detail::fail(priocclInvalidArgument, "request is NULL");
    *request = nullptr;
    if (!result) detail::fail(priocclInvalidArgument, "result is NULL");
    if (d.named && d.key.data() == nullptr) detail::fail(priocclInvalidArgument, "key is NULL");
    detail::validateEnums(d.dtype, d.op);
    Rows rows;
    Request r = detail::CommAccess::of(lookup(comm)).submitRows(d, &rows);
    *request = reinterpret_cast<priocclRequest_t>(requests().add(std::move(r)));
    *result = reinterpret_cast<priocclRows_t>(rowsResults().add(std::move(rows)));
  });
}

}  // namespace
}  // namespace prioccl::capi

using namespace prioccl;
using detail::collectiveOp;
using detail::collectiveVOp;
using detail::pointToPointOp;
using detail::rowsOp;
using Kind = detail::OpState::Kind;
using capi::guarded;
using capi::lookup;

extern "C" {

priocclResult_t priocclAllReduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                      priocclDataType_t datatype, priocclRedOp_t op, int priority,
                                      priocclComm_t comm, priocclRequest_t* request) {
  return capi::submitOp(
      __func__, comm, request,
      collectiveOp(Kind::kAllReduce, sendbuf, recvbuf, count, datatype, op, -1, priority));
}

priocclResult_t priocclAllReduceNamedAsync(const void* sendbuf, void* recvbuf, size_t count,
                                           priocclDataType_t datatype, priocclRedOp_t op,
                                           int priority, const char* key, priocclComm_t comm,
                                           priocclRequest_t* request) {
  return capi::submitNamedOp(
      __func__, comm, request, key,
      collectiveOp(Kind::kAllReduce, sendbuf, recvbuf, count, datatype, op, -1, priority));
}

priocclResult_t priocclBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count,
                                      priocclDataType_t datatype, int root, int priority,
                                      priocclComm_t comm, priocclRequest_t* request) {
  return capi::submitOp(__func__, comm, request,
                        collectiveOp(Kind::kBroadcast, sendbuff, recvbuff, count, datatype,
                                     priocclSum, root, priority));
}

priocclResult_t priocclBroadcastNamedAsync(const void* sendbuff, void* recvbuff, size_t count,
                                           priocclDataType_t datatype, int root, int priority,
                                           const char* key, priocclComm_t comm,
                                           priocclRequest_t* request) {
  return capi::submitNamedOp(__func__, comm, request, key,
                             collectiveOp(Kind::kBroadcast, sendbuff, recvbuff, count, datatype,
                                          priocclSum, root, priority));
}

priocclResult_t priocclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                 priocclDataType_t datatype, int root, priocclComm_t comm) {
  return capi::runOp(
      __func__, comm,
      collectiveOp(Kind::kBroadcast, sendbuff, recvbuff, count, datatype, priocclSum, root));
}

priocclResult_t priocclReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                                   priocclDataType_t datatype, priocclRedOp_t op, int root,
                                   int priority, priocclComm_t comm, priocclRequest_t* request) {
  return capi::submitOp(
      __func__, comm, request,
      collectiveOp(Kind::kReduce, sendbuff, recvbuff, count, datatype, op, root, priority));
}

priocclResult_t priocclReduceNamedAsync(const void* sendbuff, void* recvbuff, size_t count,
                                        priocclDataType_t datatype, priocclRedOp_t op, int root,
                                        int priority, const char* key, priocclComm_t comm,
                                        priocclRequest_t* request) {
  return capi::submitNamedOp(
      __func__, comm, request, key,
      collectiveOp(Kind::kReduce, sendbuff, recvbuff, count, datatype, op, root, priority));
}

priocclResult_t priocclReduce(const void* sendbuff, void* recvbuff, size_t count,
                              priocclDataType_t datatype, priocclRedOp_t op, int root,
                              priocclComm_t comm) {
  return capi::runOp(__func__, comm,
                     collectiveOp(Kind::kReduce, sendbuff, recvbuff, count, datatype, op, root));
}

priocclResult_t priocclAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                      priocclDataType_t datatype, int priority, priocclComm_t comm,
                                      priocclRequest_t* request) {
  return capi::submitOp(__func__, comm, request,
                        collectiveOp(Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype,
                                     priocclSum, -1, priority));
}

priocclResult_t priocclAllGatherNamedAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                           priocclDataType_t datatype, int priority,
                                           const char* key, priocclComm_t comm,
                                           priocclRequest_t* request) {
  return capi::submitNamedOp(__func__, comm, request, key,
                             collectiveOp(Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype,
                                          priocclSum, -1, priority));
}

priocclResult_t priocclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 priocclDataType_t datatype, priocclComm_t comm) {
  return capi::runOp(
      __func__, comm,
      collectiveOp(Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype, priocclSum, -1));
}

priocclResult_t priocclReduceScatterAsync(const void* sendbuff, void* recvbuff, size_t recvcount,
                                          priocclDataType_t datatype, priocclRedOp_t op,
                                          int priority, priocclComm_t comm,
                                          priocclRequest_t* request) {
  return capi::submitOp(__func__, comm, request,
                        collectiveOp(Kind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype,
                                     op, -1, priority));
}

priocclResult_t priocclReduceScatterNamedAsync(const void* sendbuff, void* recvbuff,
                                               size_t recvcount, priocclDataType_t datatype,
                                               priocclRedOp_t op, int priority, const char* key,
                                               priocclComm_t comm, priocclRequest_t* request) {
  return capi::submitNamedOp(__func__, comm, request, key,
                             collectiveOp(Kind::kReduceScatter, sendbuff, recvbuff, recvcount,
                                          datatype, op, -1, priority));
}

priocclResult_t priocclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     priocclDataType_t datatype, priocclRedOp_t op,
                                     priocclComm_t comm) {
  return capi::runOp(
      __func__, comm,
      collectiveOp(Kind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1));
}

priocclResult_t priocclAllGatherVAsync(const void* sendbuff, void* recvbuff,
                                       const size_t* recvcounts, const size_t* displs,
                                       priocclDataType_t datatype, int priority, priocclComm_t comm,
                                       priocclRequest_t* request) {
  return capi::submitOp(__func__, comm, request,
                        collectiveVOp(Kind::kAllGatherV, sendbuff, recvbuff, nullptr, nullptr,
                                      recvcounts, displs, datatype, priocclSum, priority));
}

priocclResult_t priocclAllGatherVNamedAsync(const void* sendbuff, void* recvbuff,
                                            const size_t* recvcounts, const size_t* displs,
                                            priocclDataType_t datatype, int priority,
                                            const char* key, priocclComm_t comm,
                                            priocclRequest_t* request) {
  return capi::submitNamedOp(__func__, comm, request, key,
                             collectiveVOp(Kind::kAllGatherV, sendbuff, recvbuff, nullptr, nullptr,
                                           recvcounts, displs, datatype, priocclSum, priority));
}

priocclResult_t priocclAllGatherV(const void* sendbuff, void* recvbuff, const size_t* recvcounts,
                                  const size_t* displs, priocclDataType_t datatype,
                                  priocclComm_t comm) {
  return capi::runOp(__func__, comm,
                     collectiveVOp(Kind::kAllGatherV, sendbuff, recvbuff, nullptr, nullptr,
                                   recvcounts, displs, datatype, priocclSum));
}

priocclResult_t priocclAllGatherRowsAsync(const void* sendbuff, size_t rows, size_t rowCount,
                                          priocclDataType_t datatype, int priority,
                                          priocclComm_t comm, priocclRows_t* result,
                                          priocclRequest_t* request) {
  return capi::submitRowsOp(
      __func__, comm, result, request,
      rowsOp(Kind::kAllGatherV, sendbuff, rows, nullptr, rowCount, datatype, priority));
}

priocclResult_t priocclAllGatherRowsNamedAsync(const void* sendbuff, size_t rows, size_t rowCount,
                                               priocclDataType_t datatype, int priority,
                                               const char* key, priocclComm_t comm,
                                               priocclRows_t* result, priocclRequest_t* request) {
  return capi::submitRowsOp(__func__, comm, result, request,
                            detail::named(rowsOp(Kind::kAllGatherV, sendbuff, rows, nullptr,
                                                 rowCount, datatype, priority),
                                          key ? std::string_view(key) : std::string_view()));
}

priocclResult_t priocclAllToAllRowsAsync(const void* sendbuff, const size_t* sendRows,
                                         size_t rowCount, priocclDataType_t datatype, int priority,
                                         priocclComm_t comm, priocclRows_t* result,
                                         priocclRequest_t* request) {
  return capi::submitRowsOp(
      __func__, comm, result, request,
      rowsOp(Kind::kAllToAllV, sendbuff, 0, sendRows, rowCount, datatype, priority));
}

priocclResult_t priocclAllToAllRowsNamedAsync(const void* sendbuff, const size_t* sendRows,
                                              size_t rowCount, priocclDataType_t datatype,
                                              int priority, const char* key, priocclComm_t comm,
                                              priocclRows_t* result, priocclRequest_t* request) {
  return capi::submitRowsOp(
      __func__, comm, result, request,
      detail::named(rowsOp(Kind::kAllToAllV, sendbuff, 0, sendRows, rowCount, datatype, priority),
                    key ? std::string_view(key) : std::string_view()));
}

priocclResult_t priocclRowsGet(priocclRows_t result, const void** data, size_t* bytes,
                               size_t* rowsByRank) {
  return guarded(__func__, nullptr, [&] {
    Rows r = capi::rowsResults().get(result, "result", capi::kDeadRows);
    const void* at = r.data();  // throws unless the op finished successfully
    if (data) *data = at;
    if (bytes) *bytes = r.bytes();
    if (rowsByRank)
      for (size_t k = 0; k < r.rows().size(); ++k) rowsByRank[k] = r.rows()[k];
  });
}

priocclResult_t priocclRowsFree(priocclRows_t result) {
  return guarded(__func__, nullptr,
                 [&] { capi::rowsResults().release(result, "result", capi::kDeadRows); });
}

priocclResult_t priocclReduceScatterVAsync(const void* sendbuff, void* recvbuff,
                                           const size_t* recvcounts, priocclDataType_t datatype,
                                           priocclRedOp_t op, int priority, priocclComm_t comm,
                                           priocclRequest_t* request) {
  return capi::submitOp(__func__, comm, request,
                        collectiveVOp(Kind::kReduceScatterV, sendbuff, recvbuff, nullptr, nullptr,
                                      recvcounts, nullptr, datatype, op, priority));
}

priocclResult_t priocclReduceScatterVNamedAsync(const void* sendbuff, void* recvbuff,
                                                const size_t* recvcounts,
                                                priocclDataType_t datatype, priocclRedOp_t op,
                                                int priority, const char* key, priocclComm_t comm,
                                                priocclRequest_t* request) {
  return capi::submitNamedOp(__func__, comm, request, key,
                             collectiveVOp(Kind::kReduceScatterV, sendbuff, recvbuff, nullptr,
                                           nullptr, recvcounts, nullptr, datatype, op, priority));
}

priocclResult_t priocclReduceScatterV(const void* sendbuff, void* recvbuff,
                                      const size_t* recvcounts, priocclDataType_t datatype,
                                      priocclRedOp_t op, priocclComm_t comm) {
  return capi::runOp(__func__, comm,
                     collectiveVOp(Kind::kReduceScatterV, sendbuff, recvbuff, nullptr, nullptr,
                                   recvcounts, nullptr, datatype, op));
}

priocclResult_t priocclAllToAllVAsync(const void* sendbuff, const size_t* sendcounts,
                                      const size_t* sdispls, void* recvbuff,
                                      const size_t* recvcounts, const size_t* rdispls,
                                      priocclDataType_t datatype, int priority, priocclComm_t comm,
                                      priocclRequest_t* request) {
  return capi::submitOp(__func__, comm, request,
                        collectiveVOp(Kind::kAllToAllV, sendbuff, recvbuff, sendcounts, sdispls,
                                      recvcounts, rdispls, datatype, priocclSum, priority));
}

priocclResult_t priocclAllToAllVNamedAsync(const void* sendbuff, const size_t* sendcounts,
                                           const size_t* sdispls, void* recvbuff,
                                           const size_t* recvcounts, const size_t* rdispls,
                                           priocclDataType_t datatype, int priority,
                                           const char* key, priocclComm_t comm,
                                           priocclRequest_t* request) {
  return capi::submitNamedOp(
      __func__, comm, request, key,
      collectiveVOp(Kind::kAllToAllV, sendbuff, recvbuff, sendcounts, sdispls, recvcounts, rdispls,
                    datatype, priocclSum, priority));
}

priocclResult_t priocclAllToAllV(const void* sendbuff, const size_t* sendcounts,
                                 const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
                                 const size_t* rdispls, priocclDataType_t datatype,
                                 priocclComm_t comm) {
  return capi::runOp(__func__, comm,
                     collectiveVOp(Kind::kAllToAllV, sendbuff, recvbuff, sendcounts, sdispls,
                                   recvcounts, rdispls, datatype, priocclSum));
}

priocclResult_t priocclAllToAllAsync(const void* sendbuff, void* recvbuff, size_t count,
                                     priocclDataType_t datatype, int priority, priocclComm_t comm,
                                     priocclRequest_t* request) {
  return capi::submitOp(
      __func__, comm, request,
      collectiveOp(Kind::kAllToAll, sendbuff, recvbuff, count, datatype, priocclSum, -1, priority));
}

priocclResult_t priocclAllToAllNamedAsync(const void* sendbuff, void* recvbuff, size_t count,
                                          priocclDataType_t datatype, int priority, const char* key,
                                          priocclComm_t comm, priocclRequest_t* request) {
  return capi::submitNamedOp(
      __func__, comm, request, key,
      collectiveOp(Kind::kAllToAll, sendbuff, recvbuff, count, datatype, priocclSum, -1, priority));
}

priocclResult_t priocclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                priocclDataType_t datatype, priocclComm_t comm) {
  return capi::runOp(
      __func__, comm,
      collectiveOp(Kind::kAllToAll, sendbuff, recvbuff, count, datatype, priocclSum, -1));
}

priocclResult_t priocclBarrierAsync(int priority, priocclComm_t comm, priocclRequest_t* request) {
  return capi::submitOp(
      __func__, comm, request,
      collectiveOp(Kind::kBarrier, nullptr, nullptr, 0, priocclUint8, priocclSum, -1, priority));
}

priocclResult_t priocclBarrierNamedAsync(int priority, const char* key, priocclComm_t comm,
                                         priocclRequest_t* request) {
  return capi::submitNamedOp(
      __func__, comm, request, key,
      collectiveOp(Kind::kBarrier, nullptr, nullptr, 0, priocclUint8, priocclSum, -1, priority));
}

priocclResult_t priocclBarrier(priocclComm_t comm) {
  return capi::runOp(
      __func__, comm,
      collectiveOp(Kind::kBarrier, nullptr, nullptr, 0, priocclUint8, priocclSum, -1));
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
  return capi::submitOp(__func__, comm, request,
                        pointToPointOp(Kind::kSend, buf, count, datatype, peer, tag, priority));
}

priocclResult_t priocclRecvAsync(void* buf, size_t count, priocclDataType_t datatype, int peer,
                                 int tag, int priority, priocclComm_t comm,
                                 priocclRequest_t* request) {
  return capi::submitOp(__func__, comm, request,
                        pointToPointOp(Kind::kRecv, buf, count, datatype, peer, tag, priority));
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
  return capi::runOp(__func__, comm,
                     collectiveOp(Kind::kAllReduce, sendbuf, recvbuf, count, datatype, op, -1));
}

}  // extern "C"
