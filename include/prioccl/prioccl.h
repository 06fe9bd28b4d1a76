/* prioccl: preemptible priority all-reduce for distributed training.
 *
 * C ABI in the style of NCCL: opaque handles, priocclResult_t everywhere, a human-readable
 * detail of the last failure from priocclGetLastError(). Usable from C, C++ and ctypes.
 * Licensed under the Apache License, Version 2.0. */
#ifndef PRIOCCL_H_
#define PRIOCCL_H_

#include <stddef.h>
#include <stdint.h>

#define PRIOCCL_MAJOR 0
#define PRIOCCL_MINOR 2
#define PRIOCCL_PATCH 0
#define PRIOCCL_VERSION_CODE (PRIOCCL_MAJOR * 10000 + PRIOCCL_MINOR * 100 + PRIOCCL_PATCH)

#if defined(__GNUC__)
#define PRIOCCL_API __attribute__((visibility("default")))
#else
#define PRIOCCL_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct priocclComm* priocclComm_t;
typedef struct priocclRequest* priocclRequest_t;
typedef struct priocclRows* priocclRows_t;

/* Result codes, data types and reduction ops carry NCCL's numeric values (nccl.h 2.x), so code
 * ported from NCCL that casts or stores them keeps its meaning. prioccl's own additions take
 * values past NCCL's. A test (tests/unit/test_abi.cpp) pins every value. */
typedef enum {
  priocclSuccess = 0,
  priocclUnhandledCudaError = 1, /* the NCCL backend: CUDA (or its libraries) failed */
  priocclSystemError = 2,
  priocclInternalError = 3,
  priocclInvalidArgument = 4,
  priocclInvalidUsage = 5,
  priocclRemoteError = 6,
  priocclInProgress = 7,
  priocclTimeout = 8, /* prioccl's own: an op or a peer made no progress for PRIOCCL_TIMEOUT_S */
  priocclNumResults = 9
} priocclResult_t;

typedef enum {
  priocclInt8 = 0,
  priocclChar = 0,
  priocclUint8 = 1,
  priocclInt32 = 2,
  priocclInt = 2,
  priocclUint32 = 3,
  priocclInt64 = 4,
  priocclUint64 = 5,
  priocclFloat16 = 6,
  priocclHalf = 6,
  priocclFloat32 = 7,
  priocclFloat = 7,
  priocclFloat64 = 8,
  priocclDouble = 8,
  priocclBfloat16 = 9,
  priocclNumTypes = 10
} priocclDataType_t;

typedef enum {
  priocclSum = 0,
  priocclProd = 1,
  priocclMax = 2,
  priocclMin = 3,
  priocclAvg = 4,
  priocclNumOps = 5
} priocclRedOp_t;

/* Order in which ready chunks get the wire: by priority (the default), or first-in first-out by
 * op (the baseline that ignores priorities). */
typedef enum { priocclSchedulePriority = 0, priocclScheduleFifo = 1 } priocclSchedule_t;

/* All-reduce algorithm. Auto picks per op by size from a cost model calibrated at communicator
 * creation; the others force one algorithm for every op. */
typedef enum {
  priocclAlgoAuto = 0,
  priocclAlgoRing = 1,              /* bandwidth-optimal, 2(p-1) steps */
  priocclAlgoTree = 2,              /* pipelined double binary tree */
  priocclAlgoRecursiveDoubling = 3, /* ceil(log2 p) rounds: latency-optimal for small ops */
  priocclAlgoHalvingDoubling = 4,   /* reduce-scatter by halving, all-gather by doubling: the
                                       ring's traffic in 2 log2(p) rounds, for middle sizes */
  priocclAlgoHierarchical = 5,      /* two levels: rings inside each host, one ring per local
                                       index across hosts; each host's link carries 2(n-1)/n of
                                       the op (n hosts) where a flat ring's carries 2(p-1)/p */
  priocclNumAlgos = 6
} priocclAlgorithm_t;

/* Point-to-point transport under the engine. MPI (the default) works wherever MPI does; UCX
 * reaches InfiniBand/RoCE verbs, shared memory and TCP directly (builds with UCX only); TCP needs
 * nothing but sockets. MPI bootstraps them all. */
typedef enum {
  priocclTransportMpi = 0,
  priocclTransportUcx = 1,
  /* Collectives as MPI non-blocking collectives (MPI_Iallreduce, ...), launched in an order the
   * coordinator plans by priority: the CPU twin of a NCCL backend. Point-to-point over MPI. */
  priocclTransportMpiColl = 2,
  /* Collectives as NCCL collectives on device buffers, in the same planned order (builds with
   * CUDA's headers and nccl.h; libcudart and libnccl are loaded when it is chosen). */
  priocclTransportNccl = 3,
  /* Plain TCP sockets, one connection per pair of ranks (PRIOCCL_SOCKET_IFNAME picks the
   * interfaces): no MPI or UCX on the data path; the launcher's bootstrap only exchanges
   * addresses. */
  priocclTransportTcp = 4,
  /* The default: tcp where every rank has a host of its own (several hosts, one rank each) and
   * the links measure below 600 MB/s (the slow link class), mpi otherwise. Settled at creation,
   * the same on every rank; a communicator's config() says which. */
  priocclTransportAuto = 5,
  priocclNumTransports = 6
} priocclTransport_t;

/* Tuning knobs. Start from PRIOCCL_CONFIG_INITIALIZER: a field left at its initial value (-1)
 * takes the PRIOCCL_* environment variable, or the built-in default when that is unset.
 * chunkBytes and creditBytes may be 0: derived from a measurement of the links at creation. */
typedef struct {
  size_t size;               /* sizeof(priocclConfig_t), for ABI evolution */
  long long chunkBytes;      /* PRIOCCL_CHUNK_BYTES: largest slice of an op scheduled as one unit */
  long long creditBytes;     /* PRIOCCL_CREDIT_BYTES: most bytes of sends in flight at once */
  long long windowChunks;    /* PRIOCCL_WINDOW_CHUNKS: most chunks with posted receives at once */
  int requireThreadMultiple; /* PRIOCCL_MPI_THREAD_CHECK: 1 = demand MPI_THREAD_MULTIPLE from an
                                application that initialised MPI itself; 0 = accept SERIALIZED */
  int schedule;              /* PRIOCCL_SCHEDULE: a priocclSchedule_t ("priority" or "fifo") */
  int algorithm;             /* PRIOCCL_ALGO: a priocclAlgorithm_t ("auto", "ring", "tree", "rd",
                                "hd", "hier") */
  int transport;             /* PRIOCCL_TRANSPORT: a priocclTransport_t ("auto", "mpi", "tcp") */
  double timeoutSeconds;     /* PRIOCCL_TIMEOUT_S (default 300, 0 = off): an op without progress
                                this long fails the communicator (priocclTimeout); a peer silent
                                this long is declared lost (priocclRemoteError) */
  double stallWarnSeconds;   /* PRIOCCL_STALL_WARN_S (default 60, 0 = off): a warning names an op
                                stuck this long and the ranks it waits for */
} priocclConfig_t;

#define PRIOCCL_CONFIG_INITIALIZER \
  { sizeof(priocclConfig_t), -1, -1, -1, -1, -1, -1, -1, -1.0, -1.0 }

/* What a communicator's engine has done so far (monotonic counters). */
typedef struct {
  unsigned long long opsSubmitted;
  unsigned long long opsCompleted; /* successfully */
  unsigned long long opsFailed;
  unsigned long long chunksCompleted;
  unsigned long long sendsPosted; /* a collective backend (mpi-coll): its launches */
  unsigned long long bytesSent;
  unsigned long long bytesReceived;
  unsigned long long preemptions; /* times the wire went to a more urgent chunk while a less
                                     urgent one it had been serving still had sends to make */
  double queueWaitSeconds;        /* summed over ops: submission until every rank had submitted
                                     it and it was matched (negotiation and peers' lateness) */
} priocclCounters_t;

PRIOCCL_API const char* priocclGetErrorString(priocclResult_t result);
/* Detail of the last failure seen through this communicator (or by this thread when comm is not a
 * live communicator). The string stays valid until this thread's next call of this function. */
PRIOCCL_API const char* priocclGetLastError(priocclComm_t comm);
PRIOCCL_API priocclResult_t priocclGetVersion(int* version);
/* What this build of the library has, as a set of these bits (Horovod's nccl_built() and
 * cuda_built() answer from it): */
#define PRIOCCL_FEATURE_UCX 1  /* PRIOCCL_TRANSPORT=ucx */
#define PRIOCCL_FEATURE_CUDA 2 /* device (CUDA) buffers, staged over the host transports */
#define PRIOCCL_FEATURE_NCCL 4 /* PRIOCCL_TRANSPORT=nccl */
PRIOCCL_API priocclResult_t priocclGetBuildFeatures(int* features);
/* NCCL_VERSION_CODE of the nccl.h this build was compiled against (22809 for NCCL 2.28.9), 0 in a
 * build without PRIOCCL_FEATURE_NCCL: Horovod's nccl_built(). The libnccl loaded at run time may
 * differ; PRIOCCL_TRANSPORT=nccl refuses one older than 2.10. */
PRIOCCL_API priocclResult_t priocclGetNcclVersion(int* version);
/* The value of one of this header's enumerators or integer macros by its name ("priocclFloat32",
 * "priocclSum", "PRIOCCL_FEATURE_NCCL"): for bindings that cannot read the header. An unknown
 * name is priocclInvalidArgument. PRIOCCL_ROWS_FAILED, a size_t, reads as -1. */
PRIOCCL_API priocclResult_t priocclGetConstant(const char* name, int* value);

/* All ranks of MPI_COMM_WORLD; initialises MPI (MPI_THREAD_MULTIPLE) if the caller has not. */
PRIOCCL_API priocclResult_t priocclCommInitWorld(priocclComm_t* comm);
/* Collective over an existing MPI communicator: mpiComm points to an MPI_Comm (NULL means
 * MPI_COMM_WORLD); config may be NULL. The communicator is duplicated, never used directly. */
PRIOCCL_API priocclResult_t priocclCommInitMPI(priocclComm_t* comm, const void* mpiComm,
                                               const priocclConfig_t* config);
/* Launching without MPI (NCCL's ncclGetUniqueId / ncclCommInitRank): one process makes a job id,
 * which reaches every rank by any means (the launcher's store, a file, a broadcast), and each rank
 * joins with it. The id names where rank 0 listens and carries a random job token that every
 * connection must present. Without PRIOCCL_COMM_ID the process that calls priocclGetUniqueId
 * listens at this host's first address that PRIOCCL_SOCKET_IFNAME lets through and must be the one
 * that joins as rank 0; with PRIOCCL_COMM_ID=host:port (or [ipv6]:port) every rank may call it and
 * gets the same id, and rank 0 listens there. */
#define PRIOCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[PRIOCCL_UNIQUE_ID_BYTES];
} priocclUniqueId;
PRIOCCL_API priocclResult_t priocclGetUniqueId(priocclUniqueId* uniqueId);
/* Collective over the nranks processes that pass the same id, each its own rank in 0..nranks-1;
 * no MPI is used (the bootstrap is TCP). A rank that does not arrive within PRIOCCL_TIMEOUT_S
 * fails every other rank, naming it. PRIOCCL_TRANSPORT=auto means UCX here when this build has
 * it (else prioccl's tcp); mpi and mpi-coll are refused. config may be NULL. */
PRIOCCL_API priocclResult_t priocclCommInitRank(priocclComm_t* comm, int nranks,
                                                priocclUniqueId commId, int rank);
PRIOCCL_API priocclResult_t priocclCommInitRankConfig(priocclComm_t* comm, int nranks,
                                                      priocclUniqueId commId, int rank,
                                                      const priocclConfig_t* config);
/* Callable from any thread (or a signal handler's helper thread): every priocclCommInitRank[Config]
 * in progress in this process stops waiting within about 100 ms and returns priocclInvalidUsage
 * ("cancelled"); the ranks already joined hear it and fail too. For a caller that gave up (Ctrl-C,
 * a launcher's deadline) instead of waiting PRIOCCL_TIMEOUT_S. Creations begun afterwards are not
 * affected; MPI's priocclCommInitWorld/InitMPI cannot be cancelled. */
PRIOCCL_API priocclResult_t priocclCommInitCancel(void);
/* Waits for the communicator's pending ops, stops its progress thread and finalises MPI only if
 * prioccl initialised it. Requests still held stay valid for priocclTest/priocclWait. */
PRIOCCL_API priocclResult_t priocclCommDestroy(priocclComm_t comm);
/* Callable from any thread, returns promptly: every pending and later op of the communicator
 * fails (priocclInvalidUsage), the other ranks are told (their ops fail with priocclRemoteError
 * naming this rank), and priocclCommDestroy afterwards waits for nothing. For a stuck job or a
 * failed peer: frees the ranks that would otherwise wait for it. */
PRIOCCL_API priocclResult_t priocclCommAbort(priocclComm_t comm);
/* Collective over comm (as ncclCommSplit, without a config): the ranks passing the same color >= 0
 * get a new communicator over them, ranked by key (ties by their rank in comm); color
 * PRIOCCL_SPLIT_NOCOLOR (-1) sets *newcomm to NULL. A color below -1 on any rank fails every rank
 * with priocclInvalidArgument. The new communicator has comm's configuration as it was given. */
#define PRIOCCL_SPLIT_NOCOLOR (-1)
PRIOCCL_API priocclResult_t priocclCommSplit(priocclComm_t comm, int color, int key,
                                             priocclComm_t* newcomm);
/* As ncclCommShrink: called by every rank of comm except the excludeCount ranks listed in
 * excludeRanks (those do not call it; they may be dead, rank 0 included): *newcomm becomes a
 * communicator of the others, renumbered in order, with comm's configuration as it was given.
 * Works after comm has failed (a lost rank) and leaves comm as it is: destroy it afterwards
 * (priocclCommAbort first if ops of it still wait for the dead). Every caller must list the same
 * ranks, or every caller fails within PRIOCCL_TIMEOUT_S.
 * excludeCount PRIOCCL_SHRINK_TO_LIVE (excludeRanks unused): every live rank calls it after a
 * failure, and the callers find out together who is gone; every one gets the same members. A
 * rank whose process has ended is left out at once, one that is alive but does not call after
 * PRIOCCL_TIMEOUT_S. Only for communicators made by priocclCommInitRank: over MPI
 * (priocclCommInitWorld/InitMPI) priocclInvalidUsage. */
#define PRIOCCL_SHRINK_TO_LIVE (-1)
PRIOCCL_API priocclResult_t priocclCommShrink(priocclComm_t comm, const int* excludeRanks,
                                              int excludeCount, priocclComm_t* newcomm);
/* The same with a configuration: fields left at their initializer's value keep comm's. */
PRIOCCL_API priocclResult_t priocclCommShrinkConfig(priocclComm_t comm, const int* excludeRanks,
                                                    int excludeCount, priocclComm_t* newcomm,
                                                    const priocclConfig_t* config);
/* The communicator's health without submitting an op (as ncclCommGetAsyncError): *asyncError is
 * priocclSuccess, or the error every later op gets (a lost peer, a peer's abort, a timeout). */
PRIOCCL_API priocclResult_t priocclCommGetAsyncError(priocclComm_t comm,
                                                     priocclResult_t* asyncError);
PRIOCCL_API priocclResult_t priocclCommRank(priocclComm_t comm, int* rank);
PRIOCCL_API priocclResult_t priocclCommSize(priocclComm_t comm, int* size);
/* Where this rank sits among the communicator's hosts, as the library grouped its ranks (shared
 * memory and hostname, or PRIOCCL_HOST_ID): its index among its host's ranks, their number, its
 * host's index (hosts numbered in order of their lowest rank), the number of hosts, and 1 where
 * every host has as many ranks. Any pointer may be NULL. Submits no op. */
PRIOCCL_API priocclResult_t priocclCommHostInfo(priocclComm_t comm, int* localRank, int* localSize,
                                                int* host, int* hosts, int* homogeneous);

/* CUDA streams (docs/usage.md, "Streams"). An op on device buffers starts only after the work this
 * thread queued on its stream before submitting the op; prioccl's own thread waits for that, never
 * the caller's, and ops submitted later wait behind it. The stream is per thread: a cudaStream_t,
 * or NULL (the initial value) for CUDA's legacy default stream. flags 0: later work on the stream
 * does not wait for the op (wait for its request, or priocclStreamWaitRequest), so ops submitted
 * one after another still run by priority. PRIOCCL_STREAM_HOLD: the stream's later work waits, on
 * the device, for each op too (NCCL's order; ops on one such stream then start one after another).
 */
#define PRIOCCL_STREAM_HOLD 1
PRIOCCL_API priocclResult_t priocclSetStream(void* stream, int flags);
PRIOCCL_API priocclResult_t priocclGetStream(void** stream, int* flags);
/* Work queued on `stream` from now on waits, on the device, for the request's op to end (done or
 * failed: priocclTest/priocclWait say which); returns at once, and the request stays the
 * caller's. Nothing to wait for where the op has ended. Needs the CUDA driver's
 * cuStreamWaitValue32 (priocclUnhandledCudaError without it). */
PRIOCCL_API priocclResult_t priocclStreamWaitRequest(void* stream, priocclRequest_t request);

/* Blocking all-reduce. sendbuf == recvbuf works in place; count == 0 returns at once. */
PRIOCCL_API priocclResult_t priocclAllReduce(const void* sendbuf, void* recvbuf, size_t count,
                                             priocclDataType_t datatype, priocclRedOp_t op,
                                             priocclComm_t comm);
/* Non-blocking all-reduce. priority: smaller = more urgent, any int; ties go in submission order.
 * Unnamed ops match across ranks by submission order: every rank submits the same unnamed ops in
 * the same order (a disagreement on count, datatype or op fails that op on every rank). The
 * buffers must stay untouched until the request completes; if it completes with an error because
 * the communicator failed, until priocclCommDestroy returns (a receive already under way may
 * still land). */
PRIOCCL_API priocclResult_t priocclAllReduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                                  priocclDataType_t datatype, priocclRedOp_t op,
                                                  int priority, priocclComm_t comm,
                                                  priocclRequest_t* request);
/* As priocclAllReduceAsync, with the op named by `key` (a NUL-terminated string, copied): ranks
 * may submit keyed ops in different orders; the n-th op named K on one rank matches the n-th op
 * named K on every other. Ranks that disagree on an op's count, datatype or reduction op all get
 * priocclInvalidUsage from it, with a message naming both sides; other ops are unaffected. */
PRIOCCL_API priocclResult_t priocclAllReduceNamedAsync(const void* sendbuf, void* recvbuf,
                                                       size_t count, priocclDataType_t datatype,
                                                       priocclRedOp_t op, int priority,
                                                       const char* key, priocclComm_t comm,
                                                       priocclRequest_t* request);
/* Broadcast, with ncclBroadcast's arguments (no stream): every rank's recvbuff gets count elements
 * of root's sendbuff. Only the root reads sendbuff (the others may pass NULL); sendbuff == recvbuff
 * works in place on the root. Ranks must agree on root, count and datatype: a mismatch fails the op
 * on every rank with priocclInvalidUsage naming both sides, before any data moves. Scheduled and
 * preempted by priority like an all-reduce; the Async/NamedAsync forms match as theirs do. */
PRIOCCL_API priocclResult_t priocclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                             priocclDataType_t datatype, int root,
                                             priocclComm_t comm);
PRIOCCL_API priocclResult_t priocclBroadcastAsync(const void* sendbuff, void* recvbuff,
                                                  size_t count, priocclDataType_t datatype,
                                                  int root, int priority, priocclComm_t comm,
                                                  priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclBroadcastNamedAsync(const void* sendbuff, void* recvbuff,
                                                       size_t count, priocclDataType_t datatype,
                                                       int root, int priority, const char* key,
                                                       priocclComm_t comm,
                                                       priocclRequest_t* request);
/* In place, as ncclBcast: priocclBroadcast(buff, buff, ...). */
PRIOCCL_API priocclResult_t priocclBcast(void* buff, size_t count, priocclDataType_t datatype,
                                         int root, priocclComm_t comm);
/* Reduce, with ncclReduce's arguments (no stream): root's recvbuff gets the reduction of every
 * rank's sendbuff (op as in priocclAllReduce, Avg included). Only the root writes recvbuff (the
 * others may pass NULL); sendbuff == recvbuff works in place on the root. Ranks must agree on root,
 * count, datatype and op, as for priocclBroadcast. */
PRIOCCL_API priocclResult_t priocclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                          priocclDataType_t datatype, priocclRedOp_t op, int root,
                                          priocclComm_t comm);
PRIOCCL_API priocclResult_t priocclReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                                               priocclDataType_t datatype, priocclRedOp_t op,
                                               int root, int priority, priocclComm_t comm,
                                               priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclReduceNamedAsync(const void* sendbuff, void* recvbuff,
                                                    size_t count, priocclDataType_t datatype,
                                                    priocclRedOp_t op, int root, int priority,
                                                    const char* key, priocclComm_t comm,
                                                    priocclRequest_t* request);
/* All-gather, with ncclAllGather's arguments (no stream): recvbuff (nranks * sendcount elements)
 * gets every rank's sendbuff, rank r's at element r * sendcount. In place: sendbuff == recvbuff +
 * rank * sendcount elements. Ranks must agree on sendcount and datatype. */
PRIOCCL_API priocclResult_t priocclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                             priocclDataType_t datatype, priocclComm_t comm);
PRIOCCL_API priocclResult_t priocclAllGatherAsync(const void* sendbuff, void* recvbuff,
                                                  size_t sendcount, priocclDataType_t datatype,
                                                  int priority, priocclComm_t comm,
                                                  priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclAllGatherNamedAsync(const void* sendbuff, void* recvbuff,
                                                       size_t sendcount, priocclDataType_t datatype,
                                                       int priority, const char* key,
                                                       priocclComm_t comm,
                                                       priocclRequest_t* request);
/* Reduce-scatter, with ncclReduceScatter's arguments (no stream): sendbuff holds nranks blocks of
 * recvcount elements; rank r's recvbuff gets the reduction of every rank's block r. In place:
 * recvbuff == sendbuff + rank * recvcount elements. Ranks must agree on recvcount, datatype, op. */
PRIOCCL_API priocclResult_t priocclReduceScatter(const void* sendbuff, void* recvbuff,
                                                 size_t recvcount, priocclDataType_t datatype,
                                                 priocclRedOp_t op, priocclComm_t comm);
PRIOCCL_API priocclResult_t priocclReduceScatterAsync(const void* sendbuff, void* recvbuff,
                                                      size_t recvcount, priocclDataType_t datatype,
                                                      priocclRedOp_t op, int priority,
                                                      priocclComm_t comm,
                                                      priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclReduceScatterNamedAsync(const void* sendbuff, void* recvbuff,
                                                           size_t recvcount,
                                                           priocclDataType_t datatype,
                                                           priocclRedOp_t op, int priority,
                                                           const char* key, priocclComm_t comm,
                                                           priocclRequest_t* request);
/* All-to-all, as MPI_Alltoall with equal counts (NCCL has no such call): sendbuff and recvbuff
 * hold nranks blocks of count elements; block j of rank i's sendbuff lands in block i of rank j's
 * recvbuff. Never in place: the buffers must not overlap. Ranks must agree on count and datatype.
 */
PRIOCCL_API priocclResult_t priocclAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                            priocclDataType_t datatype, priocclComm_t comm);
PRIOCCL_API priocclResult_t priocclAllToAllAsync(const void* sendbuff, void* recvbuff, size_t count,
                                                 priocclDataType_t datatype, int priority,
                                                 priocclComm_t comm, priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclAllToAllNamedAsync(const void* sendbuff, void* recvbuff,
                                                      size_t count, priocclDataType_t datatype,
                                                      int priority, const char* key,
                                                      priocclComm_t comm,
                                                      priocclRequest_t* request);
/* The v-variants, with MPI's semantics (NCCL has none): per-rank counts in arrays of nranks
 * entries (copied; NULL displacements mean packed blocks in rank order), scheduled and preempted
 * like the others. Ranks must agree on the counts and datatype (and op): a mismatch, including an
 * all-to-all-v where what rank i sends rank j is not what j expects from i, fails the op on every
 * rank with priocclInvalidUsage before any data moves.
 * All-gather-v (MPI_Allgatherv): rank r's sendbuff (recvcounts[r] elements) lands in every rank's
 * recvbuff at element displs[r]. In place: sendbuff == recvbuff + displs[rank] elements. */
PRIOCCL_API priocclResult_t priocclAllGatherV(const void* sendbuff, void* recvbuff,
                                              const size_t* recvcounts, const size_t* displs,
                                              priocclDataType_t datatype, priocclComm_t comm);
PRIOCCL_API priocclResult_t priocclAllGatherVAsync(const void* sendbuff, void* recvbuff,
                                                   const size_t* recvcounts, const size_t* displs,
                                                   priocclDataType_t datatype, int priority,
                                                   priocclComm_t comm, priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclAllGatherVNamedAsync(const void* sendbuff, void* recvbuff,
                                                        const size_t* recvcounts,
                                                        const size_t* displs,
                                                        priocclDataType_t datatype, int priority,
                                                        const char* key, priocclComm_t comm,
                                                        priocclRequest_t* request);
/* Reduce-scatter-v (MPI_Reduce_scatter): sendbuff holds nranks blocks of recvcounts[b] elements,
 * packed; rank r's recvbuff gets the reduction of every rank's block r. In place: recvbuff ==
 * sendbuff + (recvcounts[0] + ... + recvcounts[rank - 1]) elements. */
PRIOCCL_API priocclResult_t priocclReduceScatterV(const void* sendbuff, void* recvbuff,
                                                  const size_t* recvcounts,
                                                  priocclDataType_t datatype, priocclRedOp_t op,
                                                  priocclComm_t comm);
PRIOCCL_API priocclResult_t priocclReduceScatterVAsync(
    const void* sendbuff, void* recvbuff, const size_t* recvcounts, priocclDataType_t datatype,
    priocclRedOp_t op, int priority, priocclComm_t comm, priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclReduceScatterVNamedAsync(const void* sendbuff, void* recvbuff,
                                                            const size_t* recvcounts,
                                                            priocclDataType_t datatype,
                                                            priocclRedOp_t op, int priority,
                                                            const char* key, priocclComm_t comm,
                                                            priocclRequest_t* request);
/* All-to-all-v (MPI_Alltoallv): sendcounts[j] elements from sdispls[j] of sendbuff go to rank j,
 * which puts them at rdispls[i] of its recvbuff; recvcounts[i] is what a rank expects from rank
 * i. Never in place. */
PRIOCCL_API priocclResult_t priocclAllToAllV(const void* sendbuff, const size_t* sendcounts,
                                             const size_t* sdispls, void* recvbuff,
                                             const size_t* recvcounts, const size_t* rdispls,
                                             priocclDataType_t datatype, priocclComm_t comm);
PRIOCCL_API priocclResult_t priocclAllToAllVAsync(const void* sendbuff, const size_t* sendcounts,
                                                  const size_t* sdispls, void* recvbuff,
                                                  const size_t* recvcounts, const size_t* rdispls,
                                                  priocclDataType_t datatype, int priority,
                                                  priocclComm_t comm, priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclAllToAllVNamedAsync(
    const void* sendbuff, const size_t* sendcounts, const size_t* sdispls, void* recvbuff,
    const size_t* recvcounts, const size_t* rdispls, priocclDataType_t datatype, int priority,
    const char* key, priocclComm_t comm, priocclRequest_t* request);
/* The ragged collectives (Horovod's allgather, and alltoall with splits): each rank knows only its
 * own first dimension; the rows from every rank are learned inside the op, so there is no size
 * exchange to wait for first. Rows hold rowCount elements; rowCount, the datatype and the shape
 * given to priocclShapeNext (the dimensions after the first) must agree on every rank, else every
 * rank fails the op. The result is held by the library in *result: read it with priocclRowsGet
 * once the request has finished, release it with priocclRowsFree (the request is waited for and
 * released as any other). Host memory only; not with PRIOCCL_TRANSPORT=nccl.
 * PRIOCCL_ROWS_FAILED as rows (as every sendRows entry): this rank failed before the op and takes
 * part without data, so that every rank fails it, naming this one, instead of waiting for it. */
#define PRIOCCL_ROWS_FAILED ((size_t)-1)
/* All-gather: this rank's `rows` rows; the result holds every rank's, in rank order. */
PRIOCCL_API priocclResult_t priocclAllGatherRowsAsync(const void* sendbuff, size_t rows,
                                                      size_t rowCount, priocclDataType_t datatype,
                                                      int priority, priocclComm_t comm,
                                                      priocclRows_t* result,
                                                      priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclAllGatherRowsNamedAsync(
    const void* sendbuff, size_t rows, size_t rowCount, priocclDataType_t datatype, int priority,
    const char* key, priocclComm_t comm, priocclRows_t* result, priocclRequest_t* request);
/* All-to-all: sendRows[j] rows go to rank j (sendbuff holds them packed in rank order); the
 * result holds the rows from every rank, in rank order. */
PRIOCCL_API priocclResult_t priocclAllToAllRowsAsync(const void* sendbuff, const size_t* sendRows,
                                                     size_t rowCount, priocclDataType_t datatype,
                                                     int priority, priocclComm_t comm,
                                                     priocclRows_t* result,
                                                     priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclAllToAllRowsNamedAsync(const void* sendbuff,
                                                          const size_t* sendRows, size_t rowCount,
                                                          priocclDataType_t datatype, int priority,
                                                          const char* key, priocclComm_t comm,
                                                          priocclRows_t* result,
                                                          priocclRequest_t* request);
/* A ragged op's result, once its request has finished successfully (else the op's error, or
 * priocclInvalidUsage while it runs): *data (valid until priocclRowsFree), *bytes, and
 * rowsByRank[k] = the rows from rank k (the communicator's size entries). Any of the three may be
 * NULL. */
PRIOCCL_API priocclResult_t priocclRowsGet(priocclRows_t result, const void** data, size_t* bytes,
                                           size_t* rowsByRank);
PRIOCCL_API priocclResult_t priocclRowsFree(priocclRows_t result);
/* Barrier: returns (completes) on a rank once every rank has called it. */
PRIOCCL_API priocclResult_t priocclBarrier(priocclComm_t comm);
/* Horovod's join, for ranks with uneven work: blocks until every rank has joined and sets
 * *lastRank to the last one to join. Meanwhile this rank takes part in the others' named
 * all-reduces, reduces and reduce-scatters with the op's identity element (0 for sum and average;
 * an average still divides by the rank count), their named broadcasts from a rank that has not
 * joined, and their named barriers; any other op of theirs fails on every rank that submitted it,
 * naming this rank. Unnamed ops are not answered (they wait for the timeout). Not in a group. */
PRIOCCL_API priocclResult_t priocclJoin(priocclComm_t comm, int* lastRank);
/* The tensor shape (dims[0..ndims)) of this thread's next collective call: ranks whose shapes
 * differ fail that op as a mismatch though their counts agree (Horovod's rule). The next
 * collective or point-to-point call takes it, whatever its outcome; the v-variants and
 * point-to-point ops ignore it. */
PRIOCCL_API priocclResult_t priocclShapeNext(const int64_t* dims, int ndims);
PRIOCCL_API priocclResult_t priocclBarrierAsync(int priority, priocclComm_t comm,
                                                priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclBarrierNamedAsync(int priority, const char* key,
                                                     priocclComm_t comm, priocclRequest_t* request);
/* Point to point, for pipeline stages: count elements to / from peer, scheduled with the
 * collectives by priority (an urgent activation preempts a less urgent all-reduce at its next
 * step). A send and a receive between two ranks with the same tag match in submission order; both
 * must have the same count and datatype (a size mismatch fails the communicator, on both sides
 * at once: an op of 64 KiB or more also sends its total length with its first chunk). */
PRIOCCL_API priocclResult_t priocclSendAsync(const void* buf, size_t count,
                                             priocclDataType_t datatype, int peer, int tag,
                                             int priority, priocclComm_t comm,
                                             priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclRecvAsync(void* buf, size_t count, priocclDataType_t datatype,
                                             int peer, int tag, int priority, priocclComm_t comm,
                                             priocclRequest_t* request);
PRIOCCL_API priocclResult_t priocclGetCounters(priocclComm_t comm, priocclCounters_t* counters);
/* PRIOCCL_TIMELINE at run time (Horovod's start_timeline): this rank's ops from now on go to a
 * Chrome-trace file at path, named per rank as PRIOCCL_TIMELINE's are; an open timeline is closed
 * first. Times are aligned to rank 0's only when PRIOCCL_TIMELINE was set at creation. Not
 * collective. priocclSystemError when the file cannot be written. */
PRIOCCL_API priocclResult_t priocclTimelineStart(priocclComm_t comm, const char* path);
PRIOCCL_API priocclResult_t priocclTimelineStop(priocclComm_t comm);

/* Grouped submission, as ncclGroupStart/End: between the outermost start and its end, this
 * thread's calls are held back (blocking ones return priocclSuccess at once, async ones their
 * request); priocclGroupEnd submits them, waits for the blocking ones and returns the first
 * failure. Groups nest. Consecutive small all-reduces of one datatype and reduction run as one
 * op (PRIOCCL_FUSION_BYTES: fewer, larger ops, the same on every rank); the others are matched
 * one by one. */
PRIOCCL_API priocclResult_t priocclGroupStart(void);
PRIOCCL_API priocclResult_t priocclGroupEnd(void);

/* Non-blocking; sets *done to 1 when finished and returns the op's result. Never releases. */
PRIOCCL_API priocclResult_t priocclTest(priocclRequest_t request, int* done);
/* Blocks until done, returns the op's result and releases the request: call it once per request. */
PRIOCCL_API priocclResult_t priocclWait(priocclRequest_t request);

/* ---- Training modes (C++: prioccl/modes.hpp) ------------------------------------------------ */

/* Last Batch Optimization: one fused all-reduce of the whole gradient per step, overlapping the
 * next forward+backward. Collective: every rank creates it with the same count, datatype, op and
 * warm-up (checked: a disagreement fails creation on every rank). key names the fused op (NULL:
 * "prioccl.lagged"; give each object on a communicator its own). priority: INT_MAX = least
 * urgent. */
typedef struct priocclLagged* priocclLagged_t;
PRIOCCL_API priocclResult_t priocclLaggedCreate(priocclComm_t comm, size_t count,
                                                priocclDataType_t datatype, priocclRedOp_t op,
                                                int warmupSteps, int priority, const char* key,
                                                priocclLagged_t* lagged);
/* During warm-up: a synchronous all-reduce of grads into out, *hasResult = 1. Afterwards: grads
 * is copied (reusable at once) and its all-reduce started; out receives the previous step's
 * aggregate (*hasResult = 1), except at the switch step (*hasResult = 0: skip that update).
 * out may be NULL: then read the aggregate with priocclLaggedResult (one copy fewer). grads and
 * out may be host or device memory; the aggregate lives in device memory (the current device at
 * creation) where collectives run on the GPU (PRIOCCL_TRANSPORT=nccl), else in host memory. */
PRIOCCL_API priocclResult_t priocclLaggedStep(priocclLagged_t lagged, const void* grads, void* out,
                                              int* hasResult);
/* The last pending aggregate, if any (*hasResult says), into out (may be NULL). */
PRIOCCL_API priocclResult_t priocclLaggedFlush(priocclLagged_t lagged, void* out, int* hasResult);
/* The aggregate returned by the last step/flush, valid until the next call on `lagged`. */
PRIOCCL_API priocclResult_t priocclLaggedResult(priocclLagged_t lagged, const void** result);
/* Waits for the op in flight and frees everything; the handle is dead afterwards. */
PRIOCCL_API priocclResult_t priocclLaggedDestroy(priocclLagged_t lagged);
/* LB-SGD's switch decay: LR multiplier rising linearly 0 -> 2 over warmupSteps, then 2/5. */
PRIOCCL_API priocclResult_t priocclSwitchDecayLrRatio(long step, long warmupSteps, double* ratio);

/* SSD-SGD (the paper's Algorithms 1 and 2) over float32 weights updated in place: after
 * warmupSteps synchronous SGD steps, each step all-reduces (averages) the gradient in the
 * background and moves the weights by GLU; every k steps the averages are applied to an exact
 * replica of the global weights (momentum SGD with weight decay), used one step later as the
 * paper's non-blocking pull. Starting weights and hyper-parameters must be equal on every rank
 * (checked). localLr 0 means 4 x lr; defaults from the paper: alpha 2, beta 0.5, warm-up 500. */
typedef struct priocclDelayed* priocclDelayed_t;
typedef struct {
  int k;
  double lr, momentum, weightDecay; /* the global optimizer */
  double alpha, beta, localLr;      /* GLU */
  int warmupSteps;                  /* synchronous SGD steps first */
  int priority;                     /* of the background all-reduces */
} priocclDelayedConfig_t;
#define PRIOCCL_DELAYED_CONFIG_INITIALIZER \
  { 2, 0.1, 0.9, 0.0, 2.0, 0.5, 0.0, 500, 2147483647 }
PRIOCCL_API priocclResult_t priocclDelayedCreate(priocclComm_t comm, float* weights, size_t count,
                                                 const priocclDelayedConfig_t* config,
                                                 const char* key, priocclDelayed_t* delayed);
/* One iteration with this rank's gradient; *synced = 1 when the weights now derive from the
 * global ones (a warm-up step, or a step that used a pull). */
PRIOCCL_API priocclResult_t priocclDelayedStep(priocclDelayed_t delayed, const float* grads,
                                               int* synced);
/* The learning rate of the gradients pushed from now on (same value on every rank); localLr 0
 * keeps localLr/lr as created. */
PRIOCCL_API priocclResult_t priocclDelayedSetLearningRate(priocclDelayed_t delayed, double lr,
                                                          double localLr);
/* Applies everything in flight: the weights become exactly the global ones. */
PRIOCCL_API priocclResult_t priocclDelayedFlush(priocclDelayed_t delayed);
PRIOCCL_API priocclResult_t priocclDelayedDestroy(priocclDelayed_t delayed);

/* P3's per-layer gate: backward submits each layer's gradient as soon as it is computed (its
 * all-reduce gets priority = layer: layer 0 is needed first); the next forward waits for each
 * layer just before running it (*submitted = 0 when nothing was submitted since, e.g. the first
 * forward), then applies that layer's update. Ops are named "<key>.layer<i>" (key NULL:
 * "prioccl.gate"); every rank creates the gate with the same number of layers (checked). */
typedef struct priocclGate* priocclGate_t;
PRIOCCL_API priocclResult_t priocclGateCreate(priocclComm_t comm, int layers, const char* key,
                                              priocclGate_t* gate);
PRIOCCL_API priocclResult_t priocclGateSubmit(priocclGate_t gate, int layer, const void* sendbuff,
                                              void* recvbuff, size_t count,
                                              priocclDataType_t datatype, priocclRedOp_t op);
PRIOCCL_API priocclResult_t priocclGateWait(priocclGate_t gate, int layer, int* submitted);
PRIOCCL_API priocclResult_t priocclGateWaitAll(priocclGate_t gate);
/* Waits for what is in flight and releases the gate. */
PRIOCCL_API priocclResult_t priocclGateDestroy(priocclGate_t gate);

/* Kernels over flat buffers of float16, bfloat16, float32 or float64. */
/* GLU: w -= localLr*(alpha*g + wd*w + beta*(pre - w)*(1 - momentum)/(lr*k)). */
PRIOCCL_API priocclResult_t priocclGluUpdate(void* weights, const void* grads,
                                             const void* preWeights, size_t count,
                                             priocclDataType_t datatype, double localLr,
                                             double alpha, double beta, double weightDecay,
                                             double momentum, double lr, int k);
/* Momentum SGD as PyTorch's: v = momentum*v + g + wd*w; w -= lr*v. */
PRIOCCL_API priocclResult_t priocclSgdUpdate(void* weights, void* velocity, const void* grads,
                                             size_t count, priocclDataType_t datatype, double lr,
                                             double momentum, double weightDecay);
/* SpecTrain: predicted = weights - staleness*lr*velocity. */
PRIOCCL_API priocclResult_t priocclSpecTrainPredict(void* predicted, const void* weights,
                                                    const void* velocity, size_t count,
                                                    priocclDataType_t datatype, double lr,
                                                    double staleness);
/* SpecTrain's paper version difference (Eqs. 5, 6) of pipeline stage k = `stage` (0-based) of
 * N = `stages`: floor(k/2) + N - k - 1 in the forward pass (forward != 0), floor(k/2) in the
 * backward pass. The same as priocclSpecTrainStalenessRule(..., priocclStalenessPaper, ...). */
PRIOCCL_API priocclResult_t priocclSpecTrainStaleness(int stage, int stages, int forward,
                                                      int* staleness);
/* How far ahead SpecTrain predicts (the `rule` of priocclSpecTrainStalenessRule):
 * - priocclStalenessPaper: the paper's version difference above, time units (in the paper's
 *   schedule) until the minibatch completes its round trip, its backward on stage 0;
 * - priocclStalenessSchedule: the number of the stage's own optimizer steps between the pass and
 *   the update that applies the minibatch's gradient, in a 1F1B schedule with one update per
 *   minibatch per stage (prioccl.pipeline's): N - k - 1 forward, 0 backward. That is the steady
 *   state; while the pipeline fills (minibatch b < N - k - 1) only b steps intervene.
 * In such a schedule the paper's rule overshoots by floor(k/2); they agree on stages 0 and 1. */
typedef enum { priocclStalenessPaper = 0, priocclStalenessSchedule = 1 } priocclStalenessRule_t;
/* The staleness of stage `stage` of `stages` under `rule` (a priocclStalenessRule_t); an unknown
 * rule is priocclInvalidArgument. */
PRIOCCL_API priocclResult_t priocclSpecTrainStalenessRule(int stage, int stages, int forward,
                                                          int rule, int* staleness);

#ifdef __cplusplus
}
#endif

#endif /* PRIOCCL_H_ */
