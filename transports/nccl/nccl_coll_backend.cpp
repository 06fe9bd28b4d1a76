// NCCL as a collective backend (nccl_coll_backend.h). The CUDA runtime and NCCL come from dlopen,
// so their headers give the types and the libraries are needed only when this backend is used.
#include "nccl/nccl_coll_backend.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <mutex>

#include "common/dynamic_library.h"
#include "common/error.h"
#include "common/log.h"
#include "device/current_device.h"

namespace prioccl {

using detail::concat;
using detail::fail;

// prioccl's enums carry NCCL's values (prioccl.h): launches pass them through unchanged.
static_assert(static_cast<int>(priocclFloat16) == static_cast<int>(ncclFloat16) &&
                  static_cast<int>(priocclBfloat16) == static_cast<int>(ncclBfloat16) &&
                  static_cast<int>(priocclUint64) == static_cast<int>(ncclUint64) &&
                  static_cast<int>(priocclAvg) == static_cast<int>(ncclAvg) &&
                  static_cast<int>(priocclMin) == static_cast<int>(ncclMin),
              "prioccl's datatypes and ops are NCCL's");

struct NcclApi {
  std::string missing;  // why the libraries cannot be used ("" when they can)
  decltype(&cudaGetDeviceCount) getDeviceCount = nullptr;
  decltype(&cudaGetDevice) getDevice = nullptr;
  decltype(&cudaSetDevice) setDevice = nullptr;
  decltype(&cudaDeviceGetStreamPriorityRange) priorityRange = nullptr;
  decltype(&cudaStreamCreateWithPriority) streamCreate = nullptr;
  decltype(&cudaStreamDestroy) streamDestroy = nullptr;
  decltype(&cudaEventCreateWithFlags) eventCreate = nullptr;
  decltype(&cudaEventRecord) eventRecord = nullptr;
  decltype(&cudaEventQuery) eventQuery = nullptr;
  decltype(&cudaEventDestroy) eventDestroy = nullptr;
  cudaError_t (*malloc)(void**, size_t) = nullptr;  // cudaMalloc (overloaded in C++)
  decltype(&cudaFree) free = nullptr;
  decltype(&cudaGetErrorString) cudaError = nullptr;
  decltype(&ncclGetUniqueId) getUniqueId = nullptr;
  decltype(&ncclCommInitRank) commInitRank = nullptr;
  decltype(&ncclCommDestroy) commDestroy = nullptr;
  decltype(&ncclCommAbort) commAbort = nullptr;
  decltype(&ncclCommGetAsyncError) asyncError = nullptr;
  decltype(&ncclGetErrorString) errorString = nullptr;
  // Spelled out rather than decltype'd: older nccl.h lacks them (ncclGetLastError: 2.13,
  // ncclAlltoAll: 2.28), and an older libnccl binds them as null (optional below).
  const char* (*lastError)(ncclComm_t) = nullptr;
  decltype(&ncclAllReduce) allReduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclReduce) reduce = nullptr;
  decltype(&ncclAllGather) allGather = nullptr;
  decltype(&ncclReduceScatter) reduceScatter = nullptr;
  ncclResult_t (*allToAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                           cudaStream_t) = nullptr;
  decltype(&ncclGetVersion) getVersion = nullptr;
  int version = 0;  // libnccl's NCCL_VERSION_CODE
};

// NCCL_VERSION_CODE of the oldest libnccl the backend takes: ncclAvg and bfloat16 (2.10) carry
// values prioccl's enums share.
constexpr int kOldestNccl = 21000;

namespace {

const NcclApi& api() {
  static NcclApi a;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    void* rt = detail::openCudaRuntime(&tried);
    void* nc =
        rt ? detail::openFirstLibrary(
                 {"libnccl.so.2", "libnccl.so", PRIOCCL_CUDA_LIBRARY("libnccl.so.2")}, &tried)
           : nullptr;
    if (!rt || !nc) {
      a.missing = concat("cannot load ", rt ? "NCCL" : "the CUDA runtime", " (", tried, ")");
      return;
    }
    std::string& m = a.missing;
    detail::bindSymbol(rt, "cudaGetDeviceCount", &a.getDeviceCount, &m);
    detail::bindSymbol(rt, "cudaGetDevice", &a.getDevice, &m);
    detail::bindSymbol(rt, "cudaSetDevice", &a.setDevice, &m);
    detail::bindSymbol(rt, "cudaDeviceGetStreamPriorityRange", &a.priorityRange, &m);
    detail::bindSymbol(rt, "cudaStreamCreateWithPriority", &a.streamCreate, &m);
    detail::bindSymbol(rt, "cudaStreamDestroy", &a.streamDestroy, &m);
    detail::bindSymbol(rt, "cudaEventCreateWithFlags", &a.eventCreate, &m);
    detail::bindSymbol(rt, "cudaEventRecord", &a.eventRecord, &m);
    detail::bindSymbol(rt, "cudaEventQuery", &a.eventQuery, &m);
    detail::bindSymbol(rt, "cudaEventDestroy", &a.eventDestroy, &m);
    detail::bindSymbol(rt, "cudaMalloc", &a.malloc, &m);
    detail::bindSymbol(rt, "cudaFree", &a.free, &m);
    detail::bindSymbol(rt, "cudaGetErrorString", &a.cudaError, &m);
    detail::bindSymbol(nc, "ncclGetUniqueId", &a.getUniqueId, &m);
    detail::bindSymbol(nc, "ncclCommInitRank", &a.commInitRank, &m);
    detail::bindSymbol(nc, "ncclCommDestroy", &a.commDestroy, &m);
    detail::bindSymbol(nc, "ncclCommAbort", &a.commAbort, &m);
    detail::bindSymbol(nc, "ncclCommGetAsyncError", &a.asyncError, &m);
    detail::bindSymbol(nc, "ncclGetErrorString", &a.errorString, &m);
    detail::bindSymbol(nc, "ncclGetVersion", &a.getVersion, &m);
    if (a.getVersion && a.getVersion(&a.version) == ncclSuccess && a.version < kOldestNccl)
      m = concat("libnccl is NCCL ", a.version, ", older than 2.10 (", kOldestNccl, ")");
    // Optional: null when this libnccl predates them.
    a.lastError = reinterpret_cast<decltype(a.lastError)>(dlsym(nc, "ncclGetLastError"));
    a.allToAll = reinterpret_cast<decltype(a.allToAll)>(dlsym(nc, "ncclAlltoAll"));
    detail::bindSymbol(nc, "ncclAllReduce", &a.allReduce, &m);
    detail::bindSymbol(nc, "ncclBroadcast", &a.broadcast, &m);
    detail::bindSymbol(nc, "ncclReduce", &a.reduce, &m);
    detail::bindSymbol(nc, "ncclAllGather", &a.allGather, &m);
    detail::bindSymbol(nc, "ncclReduceScatter", &a.reduceScatter, &m);
  });
  return a;
}

const NcclApi& usable() {
  const NcclApi& a = api();
  if (!a.missing.empty()) fail(priocclUnhandledCudaError, "PRIOCCL_TRANSPORT=nccl: ", a.missing);
  return a;
}

}  // namespace

int NcclCollBackend::headerVersion() {
  return NCCL_VERSION_CODE;
}

std::string NcclCollBackend::unavailable() {
  const NcclApi& a = api();
  if (!a.missing.empty()) return a.missing;
  int devices = 0;
  cudaError_t e = a.getDeviceCount(&devices);
  if (e != cudaSuccess) return concat("cudaGetDeviceCount: ", a.cudaError(e));
  if (devices == 0) return "no CUDA device";
  return "";
}

void NcclCollBackend::checkCuda(int error, const char* call) const {
  if (error != cudaSuccess)
    fail(priocclUnhandledCudaError, "nccl backend: ", call, " failed on rank ", rank_, " (device ",
         device_, "): ", api_.cudaError(static_cast<cudaError_t>(error)));
}

void NcclCollBackend::check(int result, const char* call) const {
  if (result == ncclSuccess || result == ncclInProgress) return;
  auto r = static_cast<ncclResult_t>(result);
  // Before a communicator exists (ncclCommInitRank), NCCL keeps the reason for the process
  // (ncclGetLastError(NULL)): "Duplicate GPU detected ..." and the like.
  const char* last = api_.lastError ? api_.lastError(static_cast<ncclComm_t>(comm_)) : nullptr;
  // NCCL's result codes are prioccl's (ncclUnhandledCudaError .. ncclRemoteError).
  auto code =
      result >= 1 && result <= 6 ? static_cast<priocclResult_t>(result) : priocclSystemError;
  fail(code, "nccl backend: ", call, " failed on rank ", rank_, ": ", api_.errorString(r),
       last && *last ? concat(" (", last, ")") : std::string());
}

NcclCollBackend::NcclCollBackend(Bootstrap& bootstrap)
    : api_(usable()), rank_(bootstrap.rank()), size_(bootstrap.size()) {
  // Every rank learns whether every rank can go on, so that none is left in ncclCommInitRank.
  std::string why = unavailable();
  std::vector<double> bad{why.empty() ? 0.0 : 1.0};
  bootstrap.allReduceMax(bad);
  if (!why.empty())
    fail(priocclUnhandledCudaError, "PRIOCCL_TRANSPORT=nccl on rank ", rank_, ": ", why);
  if (bad[0] != 0)
    fail(priocclRemoteError,
         "PRIOCCL_TRANSPORT=nccl: another rank has no usable GPU or NCCL "
         "(its message says why)");
  checkCuda(api_.getDevice(&device_), "cudaGetDevice");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (rank_ == 0) check(api_.getUniqueId(&id), "ncclGetUniqueId");
  std::vector<std::vector<char>> all = bootstrap.allGather(&id, sizeof id);
  std::memcpy(&id, all[0].data(), sizeof id);
  ncclComm_t comm = nullptr;
  check(api_.commInitRank(&comm, size_, id, rank_), "ncclCommInitRank");
  comm_ = comm;
  int least = 0, greatest = 0;
  checkCuda(api_.priorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  cudaStream_t stream = nullptr;
  checkCuda(api_.streamCreate(&stream, cudaStreamNonBlocking, greatest),
            "cudaStreamCreateWithPriority");
  stream_ = stream;
  checkCuda(api_.malloc(&barrier_, sizeof(float)), "cudaMalloc");
  detail::log(detail::LogLevel::kInfo, "rank ", rank_, ": NCCL backend on device ", device_,
              ", stream priority ", greatest);
}

NcclCollBackend::~NcclCollBackend() {
  device::CurrentDevice on(api_.getDevice, api_.setDevice, device_);
  for (InFlight& f : inFlight_) spareEvents_.push_back(f.event);
  for (void* e : spareEvents_) api_.eventDestroy(static_cast<cudaEvent_t>(e));
  if (barrier_) api_.free(barrier_);
  if (stream_) api_.streamDestroy(static_cast<cudaStream_t>(stream_));
  if (comm_ && !abandoned_) api_.commDestroy(static_cast<ncclComm_t>(comm_));
}

// The engine calls launch and poll from its progress thread or from a user's thread waiting on
// an op, whose current device is CUDA's default (0) or whatever the user chose: the stream and
// events live on the device the communicator was created on, and a launch or event on another
// device fails. So each call runs on that device and gives the thread its own back.

void NcclCollBackend::launch(const CollLaunch& c, uint64_t cookie) {
  device::CurrentDevice on(api_.getDevice, api_.setDevice, device_);
  checkCuda(on.error(), "cudaSetDevice");
  if (c.stride != c.count)
    fail(priocclInternalError, "nccl backend: a slice of a blocked collective is not supported");
  auto comm = static_cast<ncclComm_t>(comm_);
  auto stream = static_cast<cudaStream_t>(stream_);
  auto dt = static_cast<ncclDataType_t>(c.dtype);
  auto op = static_cast<ncclRedOp_t>(c.op);
  switch (c.kind) {
    case CollKind::kAllReduce:
      check(api_.allReduce(c.send, c.recv, c.count, dt, op, comm, stream), "ncclAllReduce");
      break;
    case CollKind::kBroadcast:
      check(api_.broadcast(c.send, c.recv, c.count, dt, c.root, comm, stream), "ncclBroadcast");
      break;
    case CollKind::kReduce:
      check(api_.reduce(c.send, c.recv, c.count, dt, op, c.root, comm, stream), "ncclReduce");
      break;
    case CollKind::kAllGather:
      check(api_.allGather(c.send, c.recv, c.count, dt, comm, stream), "ncclAllGather");
      break;
    case CollKind::kReduceScatter:
      check(api_.reduceScatter(c.send, c.recv, c.count, dt, op, comm, stream), "ncclReduceScatter");
      break;
    case CollKind::kAllToAll:
      if (!api_.allToAll)
        fail(priocclInvalidUsage,
             "nccl backend: all-to-all needs ncclAlltoAll (NCCL 2.28 or "
             "later); this libnccl is NCCL ",
             api_.version, " (run all-to-all on a host transport)");
      check(api_.allToAll(c.send, c.recv, c.count, dt, comm, stream), "ncclAlltoAll");
      break;
    case CollKind::kBarrier:  // NCCL has none: an all-reduce of one float
      check(api_.allReduce(barrier_, barrier_, 1, ncclFloat32, ncclSum, comm, stream),
            "ncclAllReduce (barrier)");
      break;
  }
  void* event = nullptr;
  if (!spareEvents_.empty()) {
    event = spareEvents_.back();
    spareEvents_.pop_back();
  } else {
    cudaEvent_t e = nullptr;
    checkCuda(api_.eventCreate(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    event = e;
  }
  checkCuda(api_.eventRecord(static_cast<cudaEvent_t>(event), stream), "cudaEventRecord");
  inFlight_.push_back({cookie, event});
}

size_t NcclCollBackend::poll(std::vector<Completion>& out) {
  if (inFlight_.empty()) return 0;
  device::CurrentDevice on(api_.getDevice, api_.setDevice, device_);
  checkCuda(on.error(), "cudaSetDevice");
  size_t before = out.size(), keep = 0;
  // Launches complete in stream order: stop at the first one still running.
  size_t i = 0;
  for (; i < inFlight_.size(); ++i) {
    cudaError_t e = api_.eventQuery(static_cast<cudaEvent_t>(inFlight_[i].event));
    if (e == cudaErrorNotReady) break;
    checkCuda(e, "cudaEventQuery");
    Completion done;
    done.cookie = inFlight_[i].cookie;
    out.push_back(done);
    spareEvents_.push_back(inFlight_[i].event);
  }
  for (; i < inFlight_.size(); ++i) inFlight_[keep++] = inFlight_[i];
  inFlight_.resize(keep);
  if (!inFlight_.empty()) {  // a peer's failure shows here, not in the events
    ncclResult_t async = ncclSuccess;
    check(api_.asyncError(static_cast<ncclComm_t>(comm_), &async), "ncclCommGetAsyncError");
    check(async, "a collective in flight (ncclCommGetAsyncError)");
  }
  return out.size() - before;
}

void NcclCollBackend::abandon() {
  if (abandoned_ || !comm_) return;
  abandoned_ = true;
  api_.commAbort(static_cast<ncclComm_t>(comm_));  // ends the kernels in flight
  for (InFlight& f : inFlight_) spareEvents_.push_back(f.event);
  inFlight_.clear();
}

}  // namespace prioccl
