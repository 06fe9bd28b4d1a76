// The parameter table itself (params.h): one row per setting, NCCL_PARAM-style.
#include <cstddef>
#include <type_traits>

#include "algo/registry.h"
#include "algo/select.h"
#include "api/params.h"

namespace prioccl::detail {
namespace {

template <typename T>
constexpr CType cTypeOf() {
  if constexpr (std::is_same_v<T, long long>)
    return CType::kLongLong;
  else if constexpr (std::is_same_v<T, int>)
    return CType::kInt;
  else if constexpr (std::is_same_v<T, double>)
    return CType::kDouble;
  else
    static_assert(!sizeof(T), "priocclConfig_t fields are long long, int or double");
}

// The type and offset of priocclConfig_t's field `f`; C_LATER(f) when f began a newer layout.
#define C_FIELD(f)                                                               \
  CField {                                                                       \
    cTypeOf<decltype(priocclConfig_t::f)>(), offsetof(priocclConfig_t, f), false \
  }
#define C_LATER(f)                                                              \
  CField {                                                                      \
    cTypeOf<decltype(priocclConfig_t::f)>(), offsetof(priocclConfig_t, f), true \
  }
constexpr CField kNoC{};

// PRIOCCL_ALGO's names: "auto", then each algorithm of the registry (algo/registry.cpp) and its
// alias (accepted, not listed).
std::vector<ParamChoice> algorithmChoices() {
  std::vector<ParamChoice> out = {{"auto", priocclAlgoAuto}};
  for (const AlgoEntry& e : algoRegistry()) out.push_back({e.name, e.id});
  for (const AlgoEntry& e : algoRegistry())
    if (*e.alias) out.push_back({e.alias, e.id, true});
  return out;
}
constexpr double kGiB = 1ULL << 30, kTiB = 1ULL << 40;
constexpr bool kAgree = true, kLocal = false;
constexpr auto kComm = ParamScope::kCommunicator;

}  // namespace

// clang-format off
const std::vector<Param>& paramTable() {
  static const std::vector<Param> rows = {
    {"PRIOCCL_CHUNK_BYTES", "chunkBytes", ParamKind::kSizeOrAuto, 1, kGiB, &Config::chunkBytes,
     C_FIELD(chunkBytes), kAgree, kComm,
     "largest slice of an op scheduled as one unit (auto: 32 KiB ring segments below 600 MB/s, "
     "256 KiB above)"},
    {"PRIOCCL_CREDIT_BYTES", "creditBytes", ParamKind::kSizeOrAuto, 1, kTiB, &Config::creditBytes,
     C_FIELD(creditBytes), kLocal, kComm,
     "bytes of sends in flight; only those as urgent or more hold a send back (auto: ~0.5 ms, "
     "at most 512 KiB)"},
    {"PRIOCCL_CREDIT_MAX_BYTES", "creditMaxBytes", ParamKind::kSizeOrAuto, 1, kTiB,
     &Config::creditMaxBytes, kNoC, kLocal, kComm,
     "the credit grows to this while it holds an underused link back (auto: ~16 ms; = credit: "
     "fixed)"},
    {"PRIOCCL_WINDOW_CHUNKS", "windowChunks", ParamKind::kCount, 1, 1 << 20,
     &Config::windowChunks, C_FIELD(windowChunks), kLocal, kComm,
     "chunks per lane made live in op order (bounds scratch memory, not order)"},
    {"PRIOCCL_MPI_THREAD_CHECK", "requireThreadMultiple", ParamKind::kBool, 0, 1,
     &Config::requireThreadMultiple, C_FIELD(requireThreadMultiple), kLocal, kComm,
     "0 accepts an application's MPI_THREAD_SERIALIZED (then no heartbeats)"},
    {"PRIOCCL_FUSION_BYTES", "fusionBytes", ParamKind::kSize, 0, kGiB, &Config::fusionBytes,
     kNoC, kAgree, kComm,
     "a group's consecutive small all-reduces run as one op of up to this many bytes; 0 = off"},
    {"PRIOCCL_CACHE_CAPACITY", "cacheCapacity", ParamKind::kCount, 0, 1 << 24,
     &Config::cacheCapacity, kNoC, kAgree, kComm,
     "op signatures the negotiation remembers, so that an op seen before goes to rank 0 and back "
     "as a 16-byte slot number (Horovod's response cache); 0 = off"},
    {"PRIOCCL_SCHEDULE", "schedule", ParamKind::kChoice, 0, 0, &Config::schedule,
     C_FIELD(schedule), kLocal, kComm, "fifo ignores priorities (the baseline)",
     {{"priority", priocclSchedulePriority}, {"fifo", priocclScheduleFifo}}, "priocclSchedule_t"},
    {"PRIOCCL_ALGO", "algorithm", ParamKind::kAlgorithm, 0, 0, &Config::algorithm,
     C_LATER(algorithm), kAgree, kComm,
     "ring, tree, rd, hd, hier force one algorithm; or size rules such as rd<64K,tree",
     algorithmChoices(),
     "priocclAlgorithm_t", "the algorithm"},
    {"PRIOCCL_CALIBRATE", "calibrate", ParamKind::kBool, 0, 1, &Config::calibrate, kNoC, kLocal,
     kComm, "1: auto times the algorithms at creation (results may then differ between runs)"},
    {"PRIOCCL_TRANSPORT", "transport", ParamKind::kChoice, 0, 0, &Config::transport,
     C_LATER(transport), kAgree, kComm,
     "auto: tcp with one rank per host on links below 600 MB/s, else mpi (ucx without MPI: "
     "priocclCommInitRank); ucx: over UCX; tcp: plain sockets; mpi-coll / nccl: collectives as "
     "MPI non-blocking ones / NCCL's (GPU)",
     {{"auto", priocclTransportAuto}, {"mpi", priocclTransportMpi}, {"ucx", priocclTransportUcx},
      {"mpi-coll", priocclTransportMpiColl}, {"nccl", priocclTransportNccl},
      {"tcp", priocclTransportTcp}},
     "priocclTransport_t",
     "the transport"},
    {"PRIOCCL_HOST_ID", "hostId", ParamKind::kString, 0, 0, &Config::hostId, kNoC, kLocal, kComm,
     "ranks with the same value share a host (default: shared memory and hostname)"},
    {"PRIOCCL_PLACEMENT", "placement", ParamKind::kBool, 0, 1, &Config::placement, kNoC, kLocal,
     kComm, "0: leave the progress thread's CPUs and UCX's network device alone"},
    {"PRIOCCL_TIMELINE", "timelinePath", ParamKind::kString, 0, 0, &Config::timelinePath, kNoC,
     kLocal, kComm, "Chrome-trace JSON, one file per rank (%r = rank), all on rank 0's clock"},
    {"PRIOCCL_TIMEOUT_S", "timeoutSeconds", ParamKind::kSeconds, 0, 1e9, &Config::timeoutSeconds,
     C_LATER(timeoutSeconds), kAgree, kComm,
     "an op without progress or a peer silent this long fails the communicator; 0 = off",
     {}, "", "the timeout"},
    {"PRIOCCL_STALL_WARN_S", "stallWarnSeconds", ParamKind::kSeconds, 0, 1e9,
     &Config::stallWarnSeconds, C_FIELD(stallWarnSeconds), kLocal, kComm,
     "warn once about an op stuck this long, naming the ranks it waits for; 0 = off"},
    {"PRIOCCL_UCX_WAKEUP", "ucxWakeup", ParamKind::kBool, 0, 1, &Config::ucxWakeup, kNoC, kLocal,
     kComm, "1: over UCX, waiters sleep on the worker's event descriptor (opt-in)"},
    {"PRIOCCL_SOCKET_IFNAME", "socketIfname", ParamKind::kString, 0, 0, &Config::socketIfname,
     kNoC, kLocal, kComm,
     "tcp transport's interfaces, NCCL_SOCKET_IFNAME syntax: prefixes, ^ excludes, = exact"},
    {"PRIOCCL_SOCKET_SNDBUF", "socketSndbuf", ParamKind::kSize, 0, kGiB, &Config::socketSndbuf,
     kNoC, kLocal, kComm,
     "tcp transport: cap each socket's send buffer at this; a send completes once written into "
     "it, with no acknowledgement message (less CPU; the link idles while a sender is late); "
     "0 = off"},
    // Logging is process-wide and starts before any Config exists: log.cpp reads these itself.
    {"PRIOCCL_DEBUG", "", ParamKind::kChoice, 0, 0, std::monostate{}, kNoC, kLocal,
     ParamScope::kProcess, "log level: WARN, INFO (configuration, link, algorithm model, init timings), TRACE",
     {{"WARN", 1}, {"INFO", 2}, {"TRACE", 3}}, "", "", "unset"},
    {"PRIOCCL_DEBUG_FILE", "", ParamKind::kString, 0, 0, std::monostate{}, kNoC, kLocal,
     ParamScope::kProcess, "log to this file instead of stderr (%h host, %p pid, %r world rank)",
     {}, "", "", "unset"},
    {"PRIOCCL_LIBRARY", "", ParamKind::kString, 0, 0, std::monostate{}, kNoC, kLocal,
     ParamScope::kPython, "Python only: path of the libprioccl.so to load", {}, "", "", "unset"},
    // A setting of priocclGetUniqueId (no communicator exists yet): read by it, with getenv.
    {"PRIOCCL_COMM_ID", "", ParamKind::kString, 0, 0, std::monostate{}, kNoC, kLocal,
     ParamScope::kProcess,
     "host:port ([ipv6]:port) where rank 0 of a job launched without MPI listens; every rank's "
     "priocclGetUniqueId then gives the same id (NCCL_COMM_ID)",
     {}, "", "", "unset"},
    {"PRIOCCL_BACKEND_PRIORITIES", "", ParamKind::kBool, 0, 1, std::monostate{}, kNoC, kLocal,
     ParamScope::kPython,
     "Python only: 0 gives the torch.distributed backend's ops priority 0 (default: each "
     "all-reduce more urgent than the ones before it)",
     {}, "", "", "1"},
  };
  return rows;
}
// clang-format on

#undef C_FIELD
#undef C_LATER

}  // namespace prioccl::detail
