// CommImpl: one communicator behind the C++ facade (communicator.cpp). Its creation, agreement,
// calibration, split and teardown are in comm_lifecycle.cpp; an op's way in (argument rules,
// buffer placement, groups, the stream gate, the hand-off to the engine) in comm_submit.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algo/select.h"
#include "api/device_stager.h"
#include "api/op_rules.h"
#include "api/stream_gate.h"
#include "common/timeline.h"
#include "core/engine.h"
#include "factory.h"
#include "prioccl/prioccl.hpp"
#include "topology/host_groups.h"
#include "topology/placement.h"

namespace prioccl {

// PRIOCCL_CHUNK_BYTES=auto over PRIOCCL_TRANSPORT=nccl (CommImpl).
constexpr size_t kNcclAutoChunkBytes = 16 << 20;
// How long destroy waits for ops whose streams have work queued before them (CommImpl::destroy).
constexpr std::chrono::seconds kStreamDrainLimit{30};

namespace detail {

// Every call on a destroyed communicator fails with this.
[[noreturn]] void failDestroyed();

class CommImpl : public std::enable_shared_from_this<CommImpl> {
 public:
  // `makeBootstrap` runs once the configuration is validated.
  CommImpl(const Config& config, const std::function<std::unique_ptr<Bootstrap>()>& makeBootstrap);
  ~CommImpl() { destroy(); }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const HostLayout& hosts() const { return *hosts_; }
  const Config& config() const { return config_; }
  std::string lastError(uint64_t* serial) const { return errors_->get(serial); }
  std::string algorithmModel() const { return selector_.describe(); }
  void recordError(const std::string& message) { errors_->set(message); }
  void requireLive() const {
    if (!engine_) failDestroyed();
  }

  // Every op of the API (api/op_rules.h: its descriptor and the rules this rank can check alone;
  // the other ranks' arguments are compared when the op is matched): checked, made, placed and
  // handed to the engine (or to the group, or to its stream's gate). `callerWaits`: the caller
  // waits for it at once (a blocking call), which lets a small op run inline.
  Request submit(const OpDesc& d, bool callerWaits = false);
  // A blocking call: submitted, then waited for (inside a group: at the group's end).
  void run(const OpDesc& d);
  // A ragged op (rowsOp; api/ragged.h): the exchange of rows, then the v-collective it plans,
  // whose result goes to *result. The Request is the second op's.
  Request submitRows(const OpDesc& d, Rows* result);

  // Horovod's start_timeline / stop_timeline: this rank's timeline, from now on.
  std::string startTimeline(const std::string& path);
  void stopTimeline();

  // Horovod's join: blocks until every rank has joined, answering the others' ops meanwhile (the
  // engine's stand-ins); returns the last rank to join.
  int join();

  // Collective over this communicator's ranks: the ranks with the same color >= 0 get a new
  // communicator over them, ordered by key; color -1 gets none (nullptr). The new one is created
  // with this one's configuration as it was requested (its automatic settings measured anew).
  std::shared_ptr<CommImpl> split(int color, int key);
  // Called by every rank not in `*excluded` (which do not call it, and may be dead), or with
  // nullptr by every live rank (the bootstrap finds out who is gone): a new communicator of the
  // callers, renumbered in order, configured as `config` (nullptr: this one's as requested).
  // Uses neither this communicator's engine nor its collectives, so it works while this one has
  // failed. Refused (InvalidUsage) over MPI's bootstrap.
  std::shared_ptr<CommImpl> shrink(const std::vector<int>* excluded, const Config* config);
  const Config& requested() const { return requested_; }

  // The communicator's failure (the code every later op gets), or success; never blocks.
  priocclResult_t asyncError();

  priocclCounters_t counters();

  void abort();

  void destroy();
  // Read on every call of the API: no lock (the calls that use the engine check again under it).
  bool destroyed() const { return destroyed_.load(std::memory_order_acquire); }

  // The bytes an op reads at its send buffer and writes at its receive buffer (0: none), and
  // whether the receive buffer keeps bytes it does not write (gaps between blocks).
  struct Extents {
    size_t send = 0, recv = 0;
    bool gaps = false;
  };

  // A v-collective's layout, checked (checkCollectiveV), into `state`; returns its extents.
  static Extents fillCollectiveV(OpState& state, const OpDesc& d, int rank, int size);

 private:
  // submit()'s three families. `shape`: the pending shape (Announce::layout).
  Request collective(const OpDesc& d, uint64_t shape, bool callerWaits);
  // The matching compares the counts every rank must share (a digest of them) and, for an
  // all-to-all-v, that what each rank sends each other is what that one expects.
  Request collectiveV(const OpDesc& d, uint64_t shape, bool callerWaits);
  Request pointToPoint(const OpDesc& d);

  // A collective's common tail: its priority and key, then to the engine (or the group).
  Request submitCollective(const std::shared_ptr<OpState>& state, const OpDesc& d, bool callerWaits,
                           const Extents& extents);

  // Device buffers: a collective backend on the device (NCCL) takes them as they are, and only
  // them; everything else runs on pinned host copies (device_stager.h), and the caller's Request
  // is the returned state. Null: the op's own buffers are used.
  std::shared_ptr<OpState> placeBuffers(OpState& op, const Extents& extents);

  // Under mutex_, with an engine: hands `state` to it, or inside a group (group.h) leaves it
  // for the group's end.
  void submitOrDefer(const std::shared_ptr<OpState>& state, bool callerWaits);

  // Under mutex_, with an engine: `op` to the engine now, or to the stream gate, which hands it
  // over once its stream (and every op before it in the gate) is ready.
  void handOver(const std::shared_ptr<OpState>& op, bool callerWaits);

  // The stream gate's thread: an op whose stream is ready.
  void handOverWaiting(const std::shared_ptr<OpState>& op);

  // Under mutex_, with an engine: an op whose stream is ready goes in; a staged one starts
  // copying its input.
  void enter(const std::shared_ptr<OpState>& op, bool callerWaits);

  std::unique_ptr<Transport> agreeAndConnect();

  static std::shared_ptr<OpState> makeOp(const void* send, void* recv, size_t count,
                                         priocclDataType_t dtype, priocclRedOp_t op);

  // An op of the communicator's own, on the calling thread; returns its seconds.
  double runOwn(const void* send, void* recv, size_t count, priocclDataType_t dtype,
                priocclRedOp_t op, priocclAlgorithm_t algo);

  // Every rank must cut ops alike and choose algorithms alike (the settings that decide it were
  // compared in agreeAndConnect); then (auto algorithm) fit the cost model. The model is measured
  // once per process and group of ranks, so that communicators over the same ranks choose alike
  // (and so give the same bits); it is reused only when every rank has it.
  void agreeAndCalibrate(const std::vector<int>& processIds);

  // PRIOCCL_DEBUG=INFO: one line per host, from its lowest rank.
  void logHost(const HostGroups& hosts);

  // The progress thread near the network device, inside the rank's binding (placement.h). A
  // refusal (a cgroup narrower than the affinity mask says) leaves it where it was.
  void bindProgressThread();

  Config config_;
  Config requested_;  // as given (config_ has the automatic settings resolved): for splits
  AlgoSelector selector_;
  std::shared_ptr<const HostLayout> hosts_;  // which ranks share a host (set at creation)
  HostLevels levels_;                        // their links, when there are two levels
  Placement placement_;                      // NIC and progress-thread CPUs on this host
  std::shared_ptr<ErrorLog> errors_;
  bool heartbeats_ = true;          // every rank may call MPI concurrently (agreeAndConnect)
  TimelineClock timelineClock_;     // measured only when some rank has a timeline
  bool collectiveBackend_ = false;  // collectives run on a CollBackend (mpi-coll, nccl)
  bool deviceCollectives_ = false;  // ... on device buffers (nccl)
  int rank_ = 0, size_ = 1;
  std::mutex mutex_;
  std::unique_ptr<Bootstrap> bootstrap_;  // outlives the engine (MPI stays initialised)
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<DeviceStager> stager_;  // made with the first op on device buffers
  std::atomic<bool> destroyed_{false};    // engine_ is gone
  // Last: destroyed first, its thread stopped while the members it reaches are still there.
  std::unique_ptr<StreamGate> streamGate_ = std::make_unique<StreamGate>(
      [this](const std::shared_ptr<OpState>& op) { handOverWaiting(op); });
};

// The C ABI's way to a Communicator's CommImpl (it fills op descriptors itself).
struct CommAccess {
  static CommImpl& of(const Communicator& c) { return c.impl(); }
};

}  // namespace detail
}  // namespace prioccl
