// prioccl C++ API: RAII communicator and request handles, typed exceptions.
// The C ABI (prioccl.h) is a thin wrapper over this; both share one implementation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "prioccl/prioccl.h"

namespace prioccl {

namespace detail {
struct OpState;
struct RowsResult;
class CommImpl;
struct CommAccess;  // the library's own way from a Communicator to its CommImpl (the C ABI)
}  // namespace detail

// Every failure is one of these; code() is the matching C result.
class PRIOCCL_API Error : public std::runtime_error {
 public:
  Error(priocclResult_t code, const std::string& what) : std::runtime_error(what), code_(code) {}
  priocclResult_t code() const noexcept { return code_; }

 private:
  priocclResult_t code_;
};
#define PRIOCCL_ERROR_CLASS(Name, Code)                           \
  class PRIOCCL_API Name : public Error {                         \
   public:                                                        \
    explicit Name(const std::string& what) : Error(Code, what) {} \
  };
PRIOCCL_ERROR_CLASS(CudaError, priocclUnhandledCudaError)
PRIOCCL_ERROR_CLASS(SystemError, priocclSystemError)
PRIOCCL_ERROR_CLASS(InternalError, priocclInternalError)
PRIOCCL_ERROR_CLASS(InvalidArgument, priocclInvalidArgument)
PRIOCCL_ERROR_CLASS(InvalidUsage, priocclInvalidUsage)
PRIOCCL_ERROR_CLASS(RemoteError, priocclRemoteError)
PRIOCCL_ERROR_CLASS(Timeout, priocclTimeout)
#undef PRIOCCL_ERROR_CLASS

// Effective tuning of a communicator. fromEnv() applies PRIOCCL_* variables over the defaults.
struct PRIOCCL_API Config {
  // 0 = auto: derived at communicator creation from a measurement of the ring's links (see
  // docs/usage.md, "Configuration"); Communicator::config() reports the values in force.
  size_t chunkBytes = 0;   // PRIOCCL_CHUNK_BYTES (or "auto")
  size_t creditBytes = 0;  // PRIOCCL_CREDIT_BYTES (or "auto")
  // The credit grows up to this while sends wait for it and the link is underused (a host whose
  // cores are busy answers slowly): docs/scheduler.md. 0 = auto: ~16 ms of the link with an
  // automatic credit, the credit itself (fixed) with an explicit one.
  size_t creditMaxBytes = 0;                             // PRIOCCL_CREDIT_MAX_BYTES (or "auto")
  size_t windowChunks = 1024;                            // PRIOCCL_WINDOW_CHUNKS
  bool requireThreadMultiple = true;                     // PRIOCCL_MPI_THREAD_CHECK
  priocclSchedule_t schedule = priocclSchedulePriority;  // PRIOCCL_SCHEDULE=priority|fifo
  priocclAlgorithm_t algorithm = priocclAlgoAuto;        // PRIOCCL_ALGO=auto|ring|tree|rd|hd|hier
  // Auto only: time each algorithm at creation (tens of ms on a slow network) to fit the cost
  // model. Off by default: the timed choice differs from run to run near a crossover, and so do
  // the results' bits; false uses a fixed rule, the same in every run.
  bool calibrate = false;  // PRIOCCL_CALIBRATE
  // Per op size, taking precedence over `algorithm`: "ALGO<SIZE,...,ALGO", e.g. "rd<64K,tree"
  // (recursive doubling below 64 KiB, tree above); a term may be "auto". PRIOCCL_ALGO accepts it.
  std::string algorithmRules;
  priocclTransport_t transport = priocclTransportAuto;  // PRIOCCL_TRANSPORT=auto|mpi|ucx|tcp|...
  std::string timelinePath;  // PRIOCCL_TIMELINE: Chrome-trace JSON, one file per rank
  // An op that makes no progress for this long fails the communicator with Timeout, and a peer
  // silent this long is declared lost (RemoteError on every pending and later op). 0 = off.
  double timeoutSeconds = 300;  // PRIOCCL_TIMEOUT_S
  // An op stuck this long gets a warning naming it and the ranks it waits for. 0 = off.
  double stallWarnSeconds = 60;  // PRIOCCL_STALL_WARN_S
  // Over UCX, waiting threads sleep on the worker's event descriptor instead of napping. Opt-in
  // until an intermittent failure it showed is understood (docs/benchmarks.md, "UCX transport").
  bool ucxWakeup = false;  // PRIOCCL_UCX_WAKEUP
  // The tcp transport's interfaces, NCCL_SOCKET_IFNAME's syntax: "eth,ib" (name prefixes), "^lo"
  // (all but), "=eth0" (exact names). Empty: every interface, loopback last.
  std::string socketIfname;  // PRIOCCL_SOCKET_IFNAME
  // The tcp transport's socket send buffer (SO_SNDBUF, at least 4 TCP segments), and a send then
  // completes once its socket has taken it instead of at the receiver's acknowledgement: about
  // 40% less CPU per byte, but the sender must come back before the small buffer drains
  // (docs/benchmarks.md, "Sends that complete in a capped socket buffer"). 0: off (the kernel
  // sizes the buffer; every send waits for its acknowledgement).
  size_t socketSndbuf = 0;  // PRIOCCL_SOCKET_SNDBUF
  // Ranks with the same value share a host; empty: ranks share a host when they share memory
  // (MPI_COMM_TYPE_SHARED) and a hostname. For set-ups the detection cannot see.
  std::string hostId;  // PRIOCCL_HOST_ID
  // Bind the progress thread near the network device (inside the rank's own binding) and pick
  // UCX's device nearest the rank, unless the user chose (UCX_NET_DEVICES). false: leave both.
  bool placement = true;  // PRIOCCL_PLACEMENT
  // A group's consecutive small all-reduces (priocclGroupStart/End, Python's grouped ops and
  // DistributedOptimizer's groups) run as one op of up to this many bytes; 0: never fused.
  size_t fusionBytes = 1 << 20;  // PRIOCCL_FUSION_BYTES
  // Op signatures (name, kind, count, type, op, root, shape) the negotiation remembers: a named op
  // seen before is announced to rank 0 and decided by a 16-byte slot number instead of in full
  // (Horovod's response cache). The same on every rank; 0: off.
  size_t cacheCapacity = 1024;   // PRIOCCL_CACHE_CAPACITY
  static Config fromEnv();       // throws InvalidArgument on a malformed variable
  std::string describe() const;  // one line, for logs
  // Fills chunkBytes/creditBytes/creditMaxBytes left at 0 from a link measurement (bytes/s <= 0:
  // unmeasured).
  // `oneHost`: every rank on one host (shared memory or loopback), the fast link class for the
  // chunk size whatever the measurement says.
  void resolveAuto(double bytesPerSecond, double latencySeconds, int nranks, bool oneHost = false);
  // What the ring's links measured at communicator creation (0 when not measured).
  double linkBytesPerSecond = 0;
  double linkLatencySeconds = 0;
  // Set at creation (resolveAuto): the ranks span hosts and the links measured below 600 MB/s.
  // Then a thread that has waited 0.5 ms polls every ~50 us instead of spinning (Backoff,
  // src/core/handover.h): a completion comes every few hundred us at best on such links.
  bool slowLinks = false;
};

// One PRIOCCL_* knob as the library documents it: the rows of its parameter table
// (src/api/params.cpp), which `prioccl_info -c` prints and docs/usage.md's table must match.
// Plain data: listing them needs no MPI and no communicator.
struct PRIOCCL_API ParamInfo {
  const char* name;          // the environment variable, e.g. "PRIOCCL_CHUNK_BYTES"
  const char* field;         // its Config member (and priocclConfig_t's when inCStruct); "" if none
  const char* kind;          // "size", "size-or-auto", "count", "bool", "choice", "seconds",
                             // "string" or "algorithm-rules"
  std::string range;         // the accepted values, e.g. "auto, or 1 to 1G"
  std::string defaultValue;  // as documented: "auto", "1024", "unset"
  const char* doc;           // one line
  bool mustAgree;            // checked equal on every rank when a communicator is created
  const char* scope;         // "communicator" (a Config field), "process" (read once, before any
                             // Config: logging) or "python" (the Python package's own)
  bool inCStruct;            // settable through priocclConfig_t
};
PRIOCCL_API std::vector<ParamInfo> params();
// The value of knob `name` in `config`, as params() writes defaults ("auto", "unset"); for a knob
// outside Config, the environment's value (its default when unset). Unknown name: InvalidArgument.
PRIOCCL_API std::string paramValue(const Config& config, const std::string& name);

// "auto", "ring", "tree", "rd", "hd", "hier"; parseAlgorithm also takes "recursive_doubling",
// "halving_doubling" and "hierarchical" and returns priocclNumAlgos for an unknown name.
PRIOCCL_API const char* algorithmName(priocclAlgorithm_t a);
PRIOCCL_API priocclAlgorithm_t parseAlgorithm(const std::string& name);

// Maps C++ element types to priocclDataType_t for the typed overloads.
template <typename T>
struct DataTypeOf;
template <>
struct DataTypeOf<int8_t> {
  static constexpr priocclDataType_t value = priocclInt8;
};
template <>
struct DataTypeOf<uint8_t> {
  static constexpr priocclDataType_t value = priocclUint8;
};
template <>
struct DataTypeOf<int32_t> {
  static constexpr priocclDataType_t value = priocclInt32;
};
template <>
struct DataTypeOf<uint32_t> {
  static constexpr priocclDataType_t value = priocclUint32;
};
template <>
struct DataTypeOf<int64_t> {
  static constexpr priocclDataType_t value = priocclInt64;
};
template <>
struct DataTypeOf<uint64_t> {
  static constexpr priocclDataType_t value = priocclUint64;
};
template <>
struct DataTypeOf<float> {
  static constexpr priocclDataType_t value = priocclFloat32;
};
template <>
struct DataTypeOf<double> {
  static constexpr priocclDataType_t value = priocclFloat64;
};

// Grouped submission (ncclGroupStart/End): between the outermost groupStart() and its
// groupEnd(), this thread's ops on any communicator are held back and blocking calls return at
// once; groupEnd() hands them to their communicators (grouped by communicator, in call order),
// waits for the blocking ones and throws the first failure. Groups nest; only the outermost end
// submits. Ops in a group are still matched one by one.
PRIOCCL_API void groupStart();
PRIOCCL_API void groupEnd();

// The tensor shape of this thread's next collective (priocclShapeNext): ranks whose shapes differ
// fail that op, though their counts agree (Horovod's rule). Taken by the next collective or
// point-to-point call, which then forgets it; the v-variants and point-to-point ops ignore it.
PRIOCCL_API void shapeNext(const std::vector<int64_t>& dims);

// The CUDA stream this thread's ops on device buffers are ordered on (priocclSetStream): a
// cudaStream_t, null for CUDA's legacy default stream; `holds`: PRIOCCL_STREAM_HOLD.
PRIOCCL_API void setStream(void* stream, bool holds = false);

// Handle on one asynchronous op. Copies share the op; the op itself never depends on the handle
// staying alive (dropping every handle does not cancel it).
class PRIOCCL_API Request {
 public:
  using Callback = std::function<void(priocclResult_t, const std::string& error)>;
  Request() = default;
  bool valid() const noexcept { return state_ != nullptr; }
  // Blocks until done; throws the op's error if it failed. While it waits, this thread drives the
  // communicator's progress in place of its progress thread (spinning briefly, then napping).
  void wait() const;
  // True when done; throws the op's error if it failed.
  bool test() const;
  // Result without throwing: priocclInProgress while running.
  priocclResult_t status(std::string* error = nullptr) const;
  // Runs `cb` once when the op ends: at once on this thread if it already has, else on the thread
  // driving the communicator's progress (its progress thread, or a thread blocked in wait()).
  // Keep it short: progress stops while it runs.
  void onComplete(Callback cb) const;
  // Work queued on `stream` (a cudaStream_t; null: the legacy default stream) from now on waits,
  // on the device, for the op to end (done or failed); never blocks (priocclStreamWaitRequest).
  void streamWait(void* stream) const;

 private:
  friend class detail::CommImpl;
  explicit Request(std::shared_ptr<detail::OpState> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::OpState> state_;
};

// The result of a ragged op (Communicator::allGatherRowsAsync, allToAllRowsAsync), which the
// library holds: the rows from every rank, packed in rank order. Readable once the op's request
// has finished successfully (before that, or after a failure, data() throws); valid while any copy
// of this object lives, whatever becomes of the request.
class PRIOCCL_API Rows {
 public:
  Rows() = default;
  bool valid() const noexcept { return op_ != nullptr; }
  const void* data() const;
  size_t bytes() const;
  const std::vector<size_t>& rows() const;  // the rows from each rank

 private:
  friend class detail::CommImpl;
  Rows(std::shared_ptr<detail::OpState> op, std::shared_ptr<const detail::RowsResult> result)
      : op_(std::move(op)), result_(std::move(result)) {}
  const detail::RowsResult& ready() const;  // throws unless the op finished successfully
  std::shared_ptr<detail::OpState> op_;
  std::shared_ptr<const detail::RowsResult> result_;
};

// Where a rank sits among the communicator's hosts (ranks grouped as the library detected them:
// shared memory and hostname, or PRIOCCL_HOST_ID), known without an op: Horovod's local and
// cross ranks.
struct HostInfo {
  int localRank = 0;        // this rank's place among its host's ranks
  int localSize = 1;        // ranks on this rank's host
  int host = 0;             // this rank's host, hosts numbered in order of their lowest rank
  int hosts = 1;            // hosts in the communicator
  bool homogeneous = true;  // every host has as many ranks
};

// A job id for launching without MPI (priocclUniqueId's bytes): made by Communicator::uniqueId()
// and passed unchanged to every rank.
struct UniqueId {
  unsigned char bytes[PRIOCCL_UNIQUE_ID_BYTES] = {};
};

// A group of ranks that all-reduce together; one background progress thread owns all its
// communication. Copies share the communicator; the last one alive (or destroy()) tears it down.
class PRIOCCL_API Communicator {
 public:
  Communicator() = default;
  // All ranks of MPI_COMM_WORLD; initialises MPI with MPI_THREAD_MULTIPLE if nobody has.
  static Communicator world(const Config& config = Config::fromEnv());
  // Collective over the MPI_Comm that `mpiComm` points to (null = MPI_COMM_WORLD).
  static Communicator fromMpi(const void* mpiComm, const Config& config = Config::fromEnv());
  // Launching without MPI (priocclGetUniqueId, priocclCommInitRank): a new job id, then each of
  // the `nranks` processes joins with it as its `rank`. A join still waiting when
  // priocclCommInitCancel() is called (any thread) throws InvalidUsage within about 100 ms.
  static UniqueId uniqueId();
  static Communicator fromUniqueId(const UniqueId& id, int nranks, int rank,
                                   const Config& config = Config::fromEnv());

  bool valid() const noexcept;
  // Collective over this communicator (ncclCommSplit): the ranks passing the same color >= 0 get
  // a communicator over them, ranked by key (ties by rank here); color -1 gets an empty (invalid)
  // Communicator. A color below -1 on any rank fails every rank. The new communicator has this
  // one's configuration as requested, and its own progress thread and op numbering.
  Communicator split(int color, int key) const;
  // NCCL's ncclCommShrink: called by every rank except `excluded` (those do not call it; they
  // may be dead, rank 0 included): a communicator of the others, renumbered in order, with this
  // one's configuration as requested (or `config`). Works while this communicator has failed,
  // and leaves it as it is (destroy it, or abort it first if its ops wait for the dead). Every
  // caller must pass the same ranks, or all fail within PRIOCCL_TIMEOUT_S. Only for
  // communicators made by fromUniqueId (MPI cannot leave ranks out): InvalidUsage otherwise.
  Communicator shrink(const std::vector<int>& excluded) const;
  Communicator shrink(const std::vector<int>& excluded, const Config& config) const;
  // After a failure, called by every live rank: the callers find out together who is gone and
  // get one communicator of themselves (every caller the same members). A rank whose process
  // ended is left out at once; one alive that does not call, after PRIOCCL_TIMEOUT_S.
  Communicator shrinkToLive() const;
  Communicator shrinkToLive(const Config& config) const;
  // The communicator's failure (the result every later op gets), or priocclSuccess while it is
  // healthy. Never blocks, submits nothing (ncclCommGetAsyncError).
  priocclResult_t asyncError() const;
  int rank() const;
  int size() const;
  HostInfo hostInfo() const;
  const Config& config() const;
  // Detail of the last failure seen by this communicator ("" if none); `serial`, when given,
  // receives its process-wide order (0 if none).
  std::string lastError(uint64_t* serial = nullptr) const;
  // The algorithm cost model in force: measured times and the choice by op size.
  std::string algorithmModel() const;
  // PRIOCCL_TIMELINE at run time (Horovod's start_timeline): this rank's ops from now on go to a
  // Chrome-trace file at `path`, named per rank as PRIOCCL_TIMELINE's are (an open timeline is
  // closed first); returns the file's path. Times are aligned to rank 0's clock only when
  // PRIOCCL_TIMELINE was set at creation (the offset is measured then). Not collective.
  std::string startTimeline(const std::string& path);
  void stopTimeline();
  // Records `message` as this communicator's last failure (the C ABI's priocclGetLastError).
  void recordError(const std::string& message) const;

  Request allReduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                         priocclDataType_t datatype, priocclRedOp_t op, int priority = 0);
  // Named op: matched across ranks by (key, occurrence), so ranks may submit in any order.
  Request allReduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                         priocclDataType_t datatype, priocclRedOp_t op, int priority,
                         const std::string& key);
  // Broadcast (ncclBroadcast's arguments, plus a priority): every rank's recvbuf gets `count`
  // elements of the root's sendbuf. Only the root reads sendbuf (others may pass null); the root
  // may broadcast in place (sendbuf == recvbuf). Preemptible like an all-reduce; ranks must agree
  // on root, count and datatype (a mismatch fails the op on every rank, naming both sides).
  Request broadcastAsync(const void* sendbuf, void* recvbuf, size_t count,
                         priocclDataType_t datatype, int root, int priority = 0);
  // Named: matched across ranks by (key, occurrence), as a named all-reduce.
  Request broadcastAsync(const void* sendbuf, void* recvbuf, size_t count,
                         priocclDataType_t datatype, int root, int priority,
                         const std::string& key);
  void broadcast(const void* sendbuf, void* recvbuf, size_t count, priocclDataType_t datatype,
                 int root);
  // Reduce (ncclReduce's arguments, plus a priority): the root's recvbuf gets the reduction of
  // every rank's sendbuf. Only the root writes recvbuf (others may pass null). Preemptible; ranks
  // must agree on root, count, datatype and op.
  Request reduceAsync(const void* sendbuf, void* recvbuf, size_t count, priocclDataType_t datatype,
                      priocclRedOp_t op, int root, int priority = 0);
  Request reduceAsync(const void* sendbuf, void* recvbuf, size_t count, priocclDataType_t datatype,
                      priocclRedOp_t op, int root, int priority, const std::string& key);
  void reduce(const void* sendbuf, void* recvbuf, size_t count, priocclDataType_t datatype,
              priocclRedOp_t op, int root);
  // All-gather (ncclAllGather's arguments, plus a priority): recvbuf (size() * sendcount
  // elements) gets every rank's sendbuf, rank r's at element r * sendcount. In place: sendbuf ==
  // recvbuf + rank() * sendcount elements. Ranks must agree on sendcount and datatype.
  Request allGatherAsync(const void* sendbuf, void* recvbuf, size_t sendcount,
                         priocclDataType_t datatype, int priority = 0);
  Request allGatherAsync(const void* sendbuf, void* recvbuf, size_t sendcount,
                         priocclDataType_t datatype, int priority, const std::string& key);
  void allGather(const void* sendbuf, void* recvbuf, size_t sendcount, priocclDataType_t datatype);
  // Reduce-scatter (ncclReduceScatter's arguments, plus a priority): sendbuf holds size() blocks
  // of recvcount elements; rank r's recvbuf gets the reduction of every rank's block r. In place:
  // recvbuf == sendbuf + rank() * recvcount elements. Ranks must agree on recvcount, datatype, op.
  Request reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvcount,
                             priocclDataType_t datatype, priocclRedOp_t op, int priority = 0);
  Request reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvcount,
                             priocclDataType_t datatype, priocclRedOp_t op, int priority,
                             const std::string& key);
  void reduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                     priocclDataType_t datatype, priocclRedOp_t op);
  // All-to-all (MPI_Alltoall with equal counts, plus a priority): sendbuf and recvbuf hold size()
  // blocks of `count` elements; block j of rank i's sendbuf lands in block i of rank j's recvbuf.
  // Never in place (the buffers must not overlap). Ranks must agree on count and datatype.
  Request allToAllAsync(const void* sendbuf, void* recvbuf, size_t count,
                        priocclDataType_t datatype, int priority = 0);
  Request allToAllAsync(const void* sendbuf, void* recvbuf, size_t count,
                        priocclDataType_t datatype, int priority, const std::string& key);
  void allToAll(const void* sendbuf, void* recvbuf, size_t count, priocclDataType_t datatype);
  // The v-variants, with MPI's semantics (NCCL has none), plus a priority; each array has size()
  // entries and is copied; null displacements mean packed blocks in rank order. Preemptible like
  // the others. Ranks must agree on the counts (all-to-all-v: what rank i sends rank j is what j
  // expects from i) and datatype (and op): a mismatch fails the op on every rank before any data
  // moves. All-gather-v (MPI_Allgatherv): rank r's sendbuf (recvcounts[r] elements) lands in
  // every rank's recvbuf at element displs[r]; in place: sendbuf == recvbuf + displs[rank()].
  Request allGatherVAsync(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                          const size_t* displs, priocclDataType_t datatype, int priority = 0);
  Request allGatherVAsync(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                          const size_t* displs, priocclDataType_t datatype, int priority,
                          const std::string& key);
  void allGatherV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                  const size_t* displs, priocclDataType_t datatype);
  // Reduce-scatter-v (MPI_Reduce_scatter): sendbuf holds size() blocks of recvcounts[b]
  // elements, packed; rank r's recvbuf gets the reduction of every rank's block r. In place:
  // recvbuf == sendbuf + (recvcounts[0] + ... + recvcounts[rank() - 1]) elements.
  Request reduceScatterVAsync(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                              priocclDataType_t datatype, priocclRedOp_t op, int priority = 0);
  Request reduceScatterVAsync(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                              priocclDataType_t datatype, priocclRedOp_t op, int priority,
                              const std::string& key);
  void reduceScatterV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                      priocclDataType_t datatype, priocclRedOp_t op);
  // All-to-all-v (MPI_Alltoallv): sendcounts[j] elements from sdispls[j] go to rank j, which
  // puts them at its rdispls[i]; recvcounts[i] is what this rank expects from rank i. Never in
  // place.
  Request allToAllVAsync(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                         void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                         priocclDataType_t datatype, int priority = 0);
  Request allToAllVAsync(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                         void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                         priocclDataType_t datatype, int priority, const std::string& key);
  void allToAllV(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                 void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                 priocclDataType_t datatype);
  // Ragged all-gather (Horovod's allgather): this rank gives `rows` rows of `rowCount` elements;
  // the rows may differ between ranks, rowCount, the datatype and the shape given to shapeNext()
  // (the dimensions after the first) may not. The rows of each rank are learned inside the op
  // (no exchange to wait for first); the result is the library's, in *result. Host memory only.
  // rows = PRIOCCL_ROWS_FAILED: this rank failed before the op and takes part so that every rank
  // fails it (naming this rank) rather than wait.
  Request allGatherRowsAsync(const void* sendbuf, size_t rows, size_t rowCount,
                             priocclDataType_t datatype, Rows* result, int priority = 0);
  Request allGatherRowsAsync(const void* sendbuf, size_t rows, size_t rowCount,
                             priocclDataType_t datatype, Rows* result, int priority,
                             const std::string& key);
  // Ragged all-to-all (Horovod's alltoall with splits): sendRows[j] rows of rowCount elements go
  // to rank j, packed in rank order; *result gets the rows from every rank, in rank order
  // (Rows::rows: how many from each). PRIOCCL_ROWS_FAILED in every sendRows entry: as above.
  Request allToAllRowsAsync(const void* sendbuf, const size_t* sendRows, size_t rowCount,
                            priocclDataType_t datatype, Rows* result, int priority = 0);
  Request allToAllRowsAsync(const void* sendbuf, const size_t* sendRows, size_t rowCount,
                            priocclDataType_t datatype, Rows* result, int priority,
                            const std::string& key);
  // Barrier: completes on a rank once every rank has submitted it. Scheduled by priority like the
  // others; a named barrier matches by key.
  Request barrierAsync(int priority = 0);
  Request barrierAsync(int priority, const std::string& key);
  void barrier();
  // Horovod's join, for ranks with uneven work: a rank out of work calls join(), which blocks
  // until every rank has; meanwhile it takes part in the other ranks' named all-reduces, reduces
  // and reduce-scatters with the op's identity element (0 for sum and average: an average still
  // divides by size()), their named broadcasts (from a rank that has not joined) and barriers.
  // Any other op of theirs fails everywhere, naming the joined rank; an unnamed op is not
  // answered (it waits for the timeout). Returns the last rank to join. Not inside a group.
  int join();
  // Point to point (pipeline stages): `count` elements to or from `peer`, scheduled with the
  // collectives by priority. Sends and receives between two ranks with the same tag match in
  // submission order; both sides must agree on count and datatype (a size mismatch fails the
  // communicator). 0 <= tag < a bound that depends on the transport and the rank count
  // (thousands over MPI for small jobs; a larger tag gets InvalidArgument naming the bound).
  Request sendAsync(const void* buf, size_t count, priocclDataType_t datatype, int peer,
                    int tag = 0, int priority = 0);
  Request recvAsync(void* buf, size_t count, priocclDataType_t datatype, int peer, int tag = 0,
                    int priority = 0);
  priocclCounters_t counters() const;
  void allReduce(const void* sendbuf, void* recvbuf, size_t count, priocclDataType_t datatype,
                 priocclRedOp_t op);

  template <typename T>
  Request allReduceAsync(const T* sendbuf, T* recvbuf, size_t count, priocclRedOp_t op,
                         int priority = 0) {
    return allReduceAsync(sendbuf, recvbuf, count, DataTypeOf<T>::value, op, priority);
  }
  template <typename T>
  void allReduce(const T* sendbuf, T* recvbuf, size_t count, priocclRedOp_t op) {
    allReduce(sendbuf, recvbuf, count, DataTypeOf<T>::value, op);
  }

  // Waits for pending ops, stops the progress thread, releases MPI resources. Idempotent; any
  // later call on this communicator (or a copy) throws InvalidUsage.
  void destroy();
  // From any thread, promptly: fails every pending and later op (InvalidUsage, "aborted") and
  // tells the other ranks, whose ops then fail with RemoteError naming this rank. destroy()
  // afterwards does not wait for anything. No-op on a destroyed communicator.
  void abort();

 private:
  friend struct detail::CommAccess;
  explicit Communicator(std::shared_ptr<detail::CommImpl> impl) : impl_(std::move(impl)) {}
  detail::CommImpl& impl() const;
  std::shared_ptr<detail::CommImpl> impl_;
};

}  // namespace prioccl
