// The C++ API's Communicator: a facade over CommImpl (comm_impl.h), one line per call where it
// can be.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/comm_impl.h"
#include "api/group.h"
#include "api/op_rules.h"
#include "api/shape.h"
#include "device/device_memory.h"
#include "setup_cancel.h"

namespace prioccl {

using detail::collectiveOp;
using detail::collectiveVOp;
using detail::fail;
using detail::named;
using detail::pointToPointOp;
using detail::rowsOp;
using Kind = detail::OpState::Kind;

// ---- Communicator ----

Communicator Communicator::world(const Config& config) {
  return fromMpi(nullptr, config);
}

Communicator Communicator::fromMpi(const void* mpiComm, const Config& config) {
  return Communicator(std::make_shared<detail::CommImpl>(
      config, [&] { return makeMpiBootstrap(mpiComm, config.requireThreadMultiple); }));
}

UniqueId Communicator::uniqueId() {
  UniqueId id;
  const char* commId = std::getenv("PRIOCCL_COMM_ID");
  makeUniqueId(id.bytes, commId ? commId : "", Config::fromEnv().socketIfname);
  return id;
}

Communicator Communicator::fromUniqueId(const UniqueId& id, int nranks, int rank,
                                        const Config& config) {
  SetupScope scope;  // priocclCommInitCancel ends the waits of this creation
  try {
    return Communicator(std::make_shared<detail::CommImpl>(
        config, [&] { return makeTcpBootstrap(id.bytes, nranks, rank, config.timeoutSeconds); }));
  } catch (const Error& e) {
    if (!scope.cancelled()) throw;
    detail::fail(priocclInvalidUsage, "cancelled by priocclCommInitCancel as rank ", rank, " of ",
                 nranks, " (", e.what(), ")");
  }
}

void shapeNext(const std::vector<int64_t>& dims) {
  if (dims.size() > static_cast<size_t>(INT32_MAX))
    detail::fail(priocclInvalidArgument, "shape: ", dims.size(), " dimensions");
  detail::shape::setNext(dims.data(), static_cast<int>(dims.size()));
}

void setStream(void* stream, bool holds) {
  device::setStream({stream, holds});
}

void groupStart() {
  detail::group::start();
}

void groupEnd() {
  detail::group::end();
}

Communicator Communicator::split(int color, int key) const {
  return Communicator(impl().split(color, key));
}

Communicator Communicator::shrink(const std::vector<int>& excluded) const {
  return Communicator(impl().shrink(&excluded, nullptr));
}

Communicator Communicator::shrink(const std::vector<int>& excluded, const Config& config) const {
  return Communicator(impl().shrink(&excluded, &config));
}

Communicator Communicator::shrinkToLive() const {
  return Communicator(impl().shrink(nullptr, nullptr));
}

Communicator Communicator::shrinkToLive(const Config& config) const {
  return Communicator(impl().shrink(nullptr, &config));
}

priocclResult_t Communicator::asyncError() const {
  return impl().asyncError();
}

detail::CommImpl& Communicator::impl() const {
  if (!impl_ || impl_->destroyed())
    impl_ ? detail::failDestroyed()
          : fail(priocclInvalidUsage, "empty Communicator (default-constructed or moved from)");
  return *impl_;
}

bool Communicator::valid() const noexcept {
  return impl_ && !impl_->destroyed();
}
int Communicator::rank() const {
  return impl().rank();
}
int Communicator::size() const {
  return impl().size();
}
HostInfo Communicator::hostInfo() const {
  const HostLayout& h = impl().hosts();
  const int r = impl().rank();
  HostInfo info;
  info.host = h.hostOf[static_cast<size_t>(r)];
  info.hosts = h.hosts();
  info.localRank = h.localIndex[static_cast<size_t>(r)];
  info.localSize = static_cast<int>(h.members[static_cast<size_t>(info.host)].size());
  info.homogeneous = h.fewestPerHost() == h.mostPerHost();
  return info;
}
const Config& Communicator::config() const {
  return impl().config();
}
std::string Communicator::algorithmModel() const {
  return impl().algorithmModel();
}
std::string Communicator::lastError(uint64_t* serial) const {
  return impl().lastError(serial);
}
void Communicator::recordError(const std::string& message) const {
  impl().recordError(message);
}

Request Communicator::allReduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     priocclDataType_t datatype, priocclRedOp_t op, int priority) {
  return impl().submit(
      collectiveOp(Kind::kAllReduce, sendbuf, recvbuf, count, datatype, op, -1, priority));
}

Request Communicator::allReduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     priocclDataType_t datatype, priocclRedOp_t op, int priority,
                                     const std::string& key) {
  return impl().submit(named(
      collectiveOp(Kind::kAllReduce, sendbuf, recvbuf, count, datatype, op, -1, priority), key));
}

Request Communicator::broadcastAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     priocclDataType_t datatype, int root, int priority) {
  return impl().submit(collectiveOp(Kind::kBroadcast, sendbuf, recvbuf, count, datatype, priocclSum,
                                    root, priority));
}

Request Communicator::broadcastAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     priocclDataType_t datatype, int root, int priority,
                                     const std::string& key) {
  return impl().submit(named(
      collectiveOp(Kind::kBroadcast, sendbuf, recvbuf, count, datatype, priocclSum, root, priority),
      key));
}

Request Communicator::reduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                  priocclDataType_t datatype, priocclRedOp_t op, int root,
                                  int priority) {
  return impl().submit(
      collectiveOp(Kind::kReduce, sendbuf, recvbuf, count, datatype, op, root, priority));
}

Request Communicator::reduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                  priocclDataType_t datatype, priocclRedOp_t op, int root,
                                  int priority, const std::string& key) {
  return impl().submit(named(
      collectiveOp(Kind::kReduce, sendbuf, recvbuf, count, datatype, op, root, priority), key));
}

void Communicator::reduce(const void* sendbuf, void* recvbuf, size_t count,
                          priocclDataType_t datatype, priocclRedOp_t op, int root) {
  impl().run(collectiveOp(Kind::kReduce, sendbuf, recvbuf, count, datatype, op, root));
}

Request Communicator::allGatherAsync(const void* sendbuf, void* recvbuf, size_t sendcount,
                                     priocclDataType_t datatype, int priority) {
  return impl().submit(collectiveOp(Kind::kAllGather, sendbuf, recvbuf, sendcount, datatype,
                                    priocclSum, -1, priority));
}

Request Communicator::allGatherAsync(const void* sendbuf, void* recvbuf, size_t sendcount,
                                     priocclDataType_t datatype, int priority,
                                     const std::string& key) {
  return impl().submit(named(collectiveOp(Kind::kAllGather, sendbuf, recvbuf, sendcount, datatype,
                                          priocclSum, -1, priority),
                             key));
}

void Communicator::allGather(const void* sendbuf, void* recvbuf, size_t sendcount,
                             priocclDataType_t datatype) {
  impl().run(collectiveOp(Kind::kAllGather, sendbuf, recvbuf, sendcount, datatype, priocclSum, -1));
}

Request Communicator::reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvcount,
                                         priocclDataType_t datatype, priocclRedOp_t op,
                                         int priority) {
  return impl().submit(
      collectiveOp(Kind::kReduceScatter, sendbuf, recvbuf, recvcount, datatype, op, -1, priority));
}

Request Communicator::reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvcount,
                                         priocclDataType_t datatype, priocclRedOp_t op,
                                         int priority, const std::string& key) {
  return impl().submit(named(
      collectiveOp(Kind::kReduceScatter, sendbuf, recvbuf, recvcount, datatype, op, -1, priority),
      key));
}

void Communicator::reduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                 priocclDataType_t datatype, priocclRedOp_t op) {
  impl().run(collectiveOp(Kind::kReduceScatter, sendbuf, recvbuf, recvcount, datatype, op, -1));
}

Request Communicator::allToAllAsync(const void* sendbuf, void* recvbuf, size_t count,
                                    priocclDataType_t datatype, int priority) {
  return impl().submit(
      collectiveOp(Kind::kAllToAll, sendbuf, recvbuf, count, datatype, priocclSum, -1, priority));
}

Request Communicator::allToAllAsync(const void* sendbuf, void* recvbuf, size_t count,
                                    priocclDataType_t datatype, int priority,
                                    const std::string& key) {
  return impl().submit(named(
      collectiveOp(Kind::kAllToAll, sendbuf, recvbuf, count, datatype, priocclSum, -1, priority),
      key));
}

void Communicator::allToAll(const void* sendbuf, void* recvbuf, size_t count,
                            priocclDataType_t datatype) {
  impl().run(collectiveOp(Kind::kAllToAll, sendbuf, recvbuf, count, datatype, priocclSum, -1));
}

Request Communicator::allGatherVAsync(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                      const size_t* displs, priocclDataType_t datatype,
                                      int priority) {
  return impl().submit(collectiveVOp(Kind::kAllGatherV, sendbuf, recvbuf, nullptr, nullptr,
                                     recvcounts, displs, datatype, priocclSum, priority));
}

Request Communicator::allGatherVAsync(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                      const size_t* displs, priocclDataType_t datatype,
                                      int priority, const std::string& key) {
  return impl().submit(named(collectiveVOp(Kind::kAllGatherV, sendbuf, recvbuf, nullptr, nullptr,
                                           recvcounts, displs, datatype, priocclSum, priority),
                             key));
}

void Communicator::allGatherV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                              const size_t* displs, priocclDataType_t datatype) {
  impl().run(collectiveVOp(Kind::kAllGatherV, sendbuf, recvbuf, nullptr, nullptr, recvcounts,
                           displs, datatype, priocclSum));
}

Request Communicator::reduceScatterVAsync(const void* sendbuf, void* recvbuf,
                                          const size_t* recvcounts, priocclDataType_t datatype,
                                          priocclRedOp_t op, int priority) {
  return impl().submit(collectiveVOp(Kind::kReduceScatterV, sendbuf, recvbuf, nullptr, nullptr,
                                     recvcounts, nullptr, datatype, op, priority));
}

Request Communicator::reduceScatterVAsync(const void* sendbuf, void* recvbuf,
                                          const size_t* recvcounts, priocclDataType_t datatype,
                                          priocclRedOp_t op, int priority, const std::string& key) {
  return impl().submit(named(collectiveVOp(Kind::kReduceScatterV, sendbuf, recvbuf, nullptr,
                                           nullptr, recvcounts, nullptr, datatype, op, priority),
                             key));
}

void Communicator::reduceScatterV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                  priocclDataType_t datatype, priocclRedOp_t op) {
  impl().run(collectiveVOp(Kind::kReduceScatterV, sendbuf, recvbuf, nullptr, nullptr, recvcounts,
                           nullptr, datatype, op));
}

Request Communicator::allGatherRowsAsync(const void* sendbuf, size_t rows, size_t rowCount,
                                         priocclDataType_t datatype, Rows* result, int priority) {
  return impl().submitRows(
      rowsOp(Kind::kAllGatherV, sendbuf, rows, nullptr, rowCount, datatype, priority), result);
}

Request Communicator::allGatherRowsAsync(const void* sendbuf, size_t rows, size_t rowCount,
                                         priocclDataType_t datatype, Rows* result, int priority,
                                         const std::string& key) {
  return impl().submitRows(
      named(rowsOp(Kind::kAllGatherV, sendbuf, rows, nullptr, rowCount, datatype, priority), key),
      result);
}

Request Communicator::allToAllRowsAsync(const void* sendbuf, const size_t* sendRows,
                                        size_t rowCount, priocclDataType_t datatype, Rows* result,
                                        int priority) {
  return impl().submitRows(
      rowsOp(Kind::kAllToAllV, sendbuf, 0, sendRows, rowCount, datatype, priority), result);
}

Request Communicator::allToAllRowsAsync(const void* sendbuf, const size_t* sendRows,
                                        size_t rowCount, priocclDataType_t datatype, Rows* result,
                                        int priority, const std::string& key) {
  return impl().submitRows(
      named(rowsOp(Kind::kAllToAllV, sendbuf, 0, sendRows, rowCount, datatype, priority), key),
      result);
}

Request Communicator::allToAllVAsync(const void* sendbuf, const size_t* sendcounts,
                                     const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                                     const size_t* rdispls, priocclDataType_t datatype,
                                     int priority) {
  return impl().submit(collectiveVOp(Kind::kAllToAllV, sendbuf, recvbuf, sendcounts, sdispls,
                                     recvcounts, rdispls, datatype, priocclSum, priority));
}

Request Communicator::allToAllVAsync(const void* sendbuf, const size_t* sendcounts,
                                     const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                                     const size_t* rdispls, priocclDataType_t datatype,
                                     int priority, const std::string& key) {
  return impl().submit(named(collectiveVOp(Kind::kAllToAllV, sendbuf, recvbuf, sendcounts, sdispls,
                                           recvcounts, rdispls, datatype, priocclSum, priority),
                             key));
}

void Communicator::allToAllV(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                             void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                             priocclDataType_t datatype) {
  impl().run(collectiveVOp(Kind::kAllToAllV, sendbuf, recvbuf, sendcounts, sdispls, recvcounts,
                           rdispls, datatype, priocclSum));
}

Request Communicator::barrierAsync(int priority) {
  return impl().submit(
      collectiveOp(Kind::kBarrier, nullptr, nullptr, 0, priocclUint8, priocclSum, -1, priority));
}

Request Communicator::barrierAsync(int priority, const std::string& key) {
  return impl().submit(named(
      collectiveOp(Kind::kBarrier, nullptr, nullptr, 0, priocclUint8, priocclSum, -1, priority),
      key));
}

std::string Communicator::startTimeline(const std::string& path) {
  return impl().startTimeline(path);
}

void Communicator::stopTimeline() {
  impl().stopTimeline();
}

int Communicator::join() {
  return impl().join();
}

void Communicator::barrier() {
  impl().run(collectiveOp(Kind::kBarrier, nullptr, nullptr, 0, priocclUint8, priocclSum, -1));
}

void Communicator::broadcast(const void* sendbuf, void* recvbuf, size_t count,
                             priocclDataType_t datatype, int root) {
  impl().run(collectiveOp(Kind::kBroadcast, sendbuf, recvbuf, count, datatype, priocclSum, root));
}

Request Communicator::sendAsync(const void* buf, size_t count, priocclDataType_t datatype, int peer,
                                int tag, int priority) {
  return impl().submit(pointToPointOp(Kind::kSend, buf, count, datatype, peer, tag, priority));
}

Request Communicator::recvAsync(void* buf, size_t count, priocclDataType_t datatype, int peer,
                                int tag, int priority) {
  return impl().submit(pointToPointOp(Kind::kRecv, buf, count, datatype, peer, tag, priority));
}

priocclCounters_t Communicator::counters() const {
  return impl().counters();
}

void Communicator::allReduce(const void* sendbuf, void* recvbuf, size_t count,
                             priocclDataType_t datatype, priocclRedOp_t op) {
  impl().run(collectiveOp(Kind::kAllReduce, sendbuf, recvbuf, count, datatype, op, -1));
}

void Communicator::abort() {
  if (impl_) impl_->abort();
}

void Communicator::destroy() {
  if (impl_) impl_->destroy();
}

}  // namespace prioccl
