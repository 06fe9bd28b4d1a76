// The C++ API: Communicator and Request over CommImpl (creation, agreement, submission).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <vector>

#include "algo/select.h"
#include "api/calibration.h"
#include "api/clock_sync.h"
#include "api/device_stager.h"
#include "api/fusion.h"
#include "api/group.h"
#include "api/op_rules.h"
#include "api/params.h"
#include "api/shape.h"
#include "api/stream_gate.h"
#include "common/log.h"
#include "core/engine.h"
#include "device/device_memory.h"
#include "factory.h"
#include "reduce/reduce.h"
#include "topology/host_groups.h"
#include "topology/placement.h"

namespace prioccl {

// PRIOCCL_CHUNK_BYTES=auto over PRIOCCL_TRANSPORT=nccl (CommImpl).
constexpr size_t kNcclAutoChunkBytes = 16 << 20;
// How long destroy waits for ops whose streams have work queued before them (CommImpl::destroy).
constexpr std::chrono::seconds kStreamDrainLimit{30};
namespace detail {

namespace {
// Every call on a destroyed communicator fails with this.
[[noreturn]] void failDestroyed() {
  fail(priocclInvalidUsage, "communicator has been destroyed");
}
}  // namespace

class CommImpl : public std::enable_shared_from_this<CommImpl> {
 public:
  // `makeBootstrap` runs once the configuration is validated.
  CommImpl(const Config& config, const std::function<std::unique_ptr<Bootstrap>()>& makeBootstrap)
      : config_(config), requested_(config), errors_(std::make_shared<ErrorLog>()) {
    validateConfig(config_);  // the parameter table's ranges
    // Members are destroyed in reverse: on a throw below, the engine goes before the bootstrap.
    bootstrap_ = makeBootstrap();
    // PRIOCCL_DEBUG_FILE's %r: lines logged from here on know their rank.
    setLogRank(bootstrap_->processIds()[static_cast<size_t>(bootstrap_->rank())]);
    LinkEstimate link = measureRingLink(*bootstrap_);
    // Over NCCL a chunk is one kernel launch on the GPU's own links, which the bootstrap's link
    // measurement (host memory, MPI) says nothing about: launches cost microseconds each, so a
    // chunk must be large enough for NCCL to reach its bandwidth (16 MiB: an urgent op then
    // waits behind at most two such launches, tens of microseconds on NVLink).
    if (config_.transport == priocclTransportNccl && config_.chunkBytes == 0)
      config_.chunkBytes = kNcclAutoChunkBytes;
    HostGroups hosts = detectHostGroups(*bootstrap_, config_.hostId);
    hosts_ = std::make_shared<const HostLayout>(hosts.layout);
    // Ranks all on one host talk over shared memory or loopback: the fast link class whatever a
    // busy host measures, so that the chunk size, and with it the bits, cannot change with load.
    config_.resolveAuto(link.bytesPerSecond, link.latencySeconds, link.nranks,
                        hosts_->hosts() == 1);
    // One rank per host on several hosts behind links of the slow class (below ~5 Gbit/s):
    // prioccl's own sockets read each message straight into its buffer where MPI's TCP path
    // copies it (docs/benchmarks.md, "TCP transport"). Within a host MPI's shared memory stays,
    // and on faster links MPI's own fabric (verbs, UCX) may beat sockets: not measured, so MPI.
    // The layout and the link class are the same on every rank, and so the choice.
    if (config_.transport == priocclTransportAuto)
      config_.transport = config_.slowLinks && hosts_->hosts() == bootstrap_->size()
                              ? priocclTransportTcp
                              : priocclTransportMpi;
    levels_ = measureHostLevels(*bootstrap_, *hosts_);
    placement_ = choosePlacement(config_.placement, std::getenv("UCX_NET_DEVICES"));
    logHost(hosts);
    std::unique_ptr<Transport> transport = agreeAndConnect();
    rank_ = transport->rank();
    size_ = transport->size();
    if (rank_ == 0)
      log(LogLevel::kInfo, "prioccl ", PRIOCCL_MAJOR, ".", PRIOCCL_MINOR, ".", PRIOCCL_PATCH,
          " nranks=", size_, " ", config_.describe());
    std::unique_ptr<CollBackend> collectives = makeCollBackend(config_.transport, *bootstrap_);
    collectiveBackend_ = collectives != nullptr;
    deviceCollectives_ = collectives && collectives->deviceBuffers();
    engine_ = std::make_unique<Engine>(std::move(transport), config_, selector_, errors_,
                                       heartbeats_, timelineClock_, std::move(collectives), hosts_);
    bindProgressThread();
    agreeAndCalibrate(bootstrap_->processIds());
    engine_->startApplication();  // counters and op numbers are the application's
    if (rank_ == 0) log(LogLevel::kInfo, "algorithm model: ", selector_.describe());
  }
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

  // A collective of one count (api/op_rules.h: which kinds, and what this rank can check alone;
  // the other ranks' arguments are compared when the op is matched). `op` is unused by a
  // broadcast, an all-gather and an all-to-all.
  Request collectiveAsync(OpState::Kind kind, const void* send, void* recv, size_t count,
                          priocclDataType_t dtype, priocclRedOp_t op, int root, int priority,
                          const std::string* key, bool callerWaits = false) {
    using Kind = OpState::Kind;
    const uint64_t shape = shape::takeNext();  // taken first: a failing call must not leave it
    const CollectiveExtents x =
        checkCollective({kind, send, recv, count, dtype, root}, rank_, size_);
    auto state = makeOp(x.send, x.recv, count, dtype, kind == Kind::kBroadcast ? priocclSum : op);
    state->kind = kind;
    state->root = x.root;
    state->layout = shape;  // compared across ranks (Announce::layout)
    return submitCollective(state, priority, key, callerWaits, {x.sendBytes, x.recvBytes, false});
  }

  // A v-collective (api/op_rules.h). The arrays are copied. The matching compares the counts
  // every rank must share (a digest of them) and, for an all-to-all-v, that what each rank sends
  // each other is what that one expects.
  Request collectiveVAsync(OpState::Kind kind, const void* send, void* recv,
                           const size_t* sendCounts, const size_t* sendDispls,
                           const size_t* recvCounts, const size_t* recvDispls,
                           priocclDataType_t dtype, priocclRedOp_t op, int priority,
                           const std::string* key, bool callerWaits = false) {
    using Kind = OpState::Kind;
    shape::takeNext();  // the v-variants compare their counts instead (layout)
    CollectiveVLayout v = checkCollectiveV(
        {kind, send, recv, sendCounts, sendDispls, recvCounts, recvDispls, dtype}, rank_, size_);
    auto state = makeOp(send, recv, 0, dtype, kind == Kind::kReduceScatterV ? op : priocclSum);
    state->kind = kind;
    state->count = v.largest;
    state->sendCounts = std::move(v.sendCounts);
    state->sendDispls = std::move(v.sendDispls);
    state->recvCounts = std::move(v.recvCounts);
    state->recvDispls = std::move(v.recvDispls);
    if (kind == Kind::kAllToAllV) {
      PairTerms t = pairTerms(rank_, state->sendCounts, state->recvCounts);
      state->pairDigest = t.digest;
      state->pairCount = t.count;
      state->pairWhere = t.where;
    } else {
      state->layout =
          layoutDigest(kind == Kind::kAllGatherV ? state->recvCounts : state->sendCounts);
    }
    const size_t elem = reduce::dtypeSize(dtype);
    // Blocks may leave gaps in the receive buffer, which a staged copy must carry unchanged.
    return submitCollective(
        state, priority, key, callerWaits,
        {v.sendElems * elem, v.recvElems * elem, kind != Kind::kReduceScatterV});
  }

  // Horovod's start_timeline / stop_timeline: this rank's timeline, from now on.
  std::string startTimeline(const std::string& path) {
    if (path.empty()) fail(priocclInvalidArgument, "startTimeline: the path is empty");
    std::lock_guard<std::mutex> lock(mutex_);
    requireLive();
    std::string file = engine_->startTimeline(path);
    if (file.empty())
      fail(priocclSystemError, "startTimeline: cannot write the timeline at ", path,
           " (the log says why)");
    return file;
  }
  void stopTimeline() {
    std::lock_guard<std::mutex> lock(mutex_);
    requireLive();
    engine_->stopTimeline();
  }

  // Horovod's join: blocks until every rank has joined, answering the others' ops meanwhile (the
  // engine's stand-ins); returns the last rank to join.
  int join() {
    if (group::active())
      fail(priocclInvalidUsage,
           "join: not inside a group (priocclGroupStart): it blocks until "
           "every rank has joined");
    if (deviceCollectives_)
      fail(priocclInvalidUsage,
           "join: not available with PRIOCCL_TRANSPORT=nccl (a joined rank answers the others' "
           "ops from host buffers, which NCCL cannot take)");
    static const std::string kJoinKey = "prioccl.join";
    auto state = makeOp(nullptr, nullptr, 0, priocclUint8, priocclSum);
    state->kind = OpState::Kind::kJoin;
    submitCollective(state, 0, &kJoinKey, true, Extents()).wait();
    return state->root;  // written before the op finished
  }

  // The bytes an op reads at its send buffer and writes at its receive buffer (0: none), and
  // whether the receive buffer keeps bytes it does not write (gaps between blocks).
  struct Extents {
    size_t send = 0, recv = 0;
    bool gaps = false;
  };

  // A collective's common tail: its priority and key, then to the engine (or the group).
  Request submitCollective(const std::shared_ptr<OpState>& state, int priority,
                           const std::string* key, bool callerWaits, const Extents& extents) {
    state->priority = priority;
    if (key) {
      state->named = true;
      state->key = *key;
    }
    state->errorLog = errors_;
    std::shared_ptr<OpState> user = placeBuffers(*state, extents);
    std::lock_guard<std::mutex> lock(mutex_);
    requireLive();
    submitOrDefer(state, callerWaits && !user);  // a staged op completes off the engine's path
    return Request(user ? user : state);
  }

  // Device buffers: a collective backend on the device (NCCL) takes them as they are, and only
  // them; everything else runs on pinned host copies (device_stager.h), and the caller's Request
  // is the returned state. Null: the op's own buffers are used.
  std::shared_ptr<OpState> placeBuffers(OpState& op, const Extents& extents) {
    device::DeviceMemory* memory = device::current();
    if (!memory) return nullptr;
    // Asked once per buffer (cudaPointerGetAttributes: about a microsecond each).
    const bool sendUsed = op.send && extents.send > 0, recvUsed = op.recv && extents.recv > 0;
    const bool sendDev = sendUsed && memory->isDevice(op.send);
    const bool recvDev =
        recvUsed && (sendUsed && op.recv == op.send ? sendDev : memory->isDevice(op.recv));
    // The op's place in the thread's stream (docs/usage.md, "Streams"): after the work queued
    // there so far; with a holding stream, before the work queued there next.
    const bool onGpu = sendDev || recvDev;
    const device::ThreadStream& stream = device::stream();
    std::shared_ptr<device::StreamFence> fence = onGpu ? memory->fence(stream.stream) : nullptr;
    op.fence = fence;  // the stream gate's (stream_gate.h); null: nothing to wait for
    std::shared_ptr<device::StreamHold> held =
        onGpu && stream.holds ? memory->hold(stream.stream) : nullptr;
    std::shared_ptr<OpState> user;
    if (deviceCollectives_ && CollectiveRunner::runs(op.kind)) {
      const char* which = sendUsed && !sendDev   ? "sendbuf"
                          : recvUsed && !recvDev ? "recvbuf"
                                                 : nullptr;
      if (which)
        fail(priocclInvalidArgument, kindName(op.kind), ": ", which,
             " is host memory, but PRIOCCL_TRANSPORT=nccl runs collectives on the GPU: pass "
             "device buffers (or choose a host transport, which stages device buffers)");
    } else if (onGpu) {
      std::shared_ptr<DeviceStager> stager;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        requireLive();
        if (!stager_) {
          std::shared_ptr<ProgressGate> gate = engine_->gate();  // outlives the engine
          stager_ = std::make_shared<DeviceStager>(
              *memory, config_.chunkBytes,
              [gate] { withEngine(*gate, [](Engine& e) { e.poke(); }); },
              [gate] { withEngine(*gate, [](Engine& e) { e.abort(); }); });
        }
        stager = stager_;
      }
      user = stager->stage(op, sendDev ? extents.send : 0, recvDev ? extents.recv : 0, extents.gaps,
                           fence != nullptr);
    }
    // Registered before the op is submitted: nothing else touches its callbacks yet. (An op that
    // never reaches the engine releases the stream when its state goes.)
    if (held)
      (user ? *user : op).callbacks.push_back([held](priocclResult_t, const std::string&) {
        held->release();
      });
    return user;
  }

  // A send (buf read) or receive (buf written) of `count` elements with `peer`.
  Request pointToPoint(OpState::Kind kind, void* buf, size_t count, priocclDataType_t dtype,
                       int peer, int tag, int priority) {
    shape::takeNext();  // point-to-point ops are matched by order and count only
    const char* what = kind == OpState::Kind::kSend ? "send" : "recv";
    size_t elem = reduce::dtypeSize(dtype);
    if (count > SIZE_MAX / elem)
      fail(priocclInvalidArgument, what, ": count ", count, " overflows the address space");
    if (count > 0 && !buf) fail(priocclInvalidArgument, what, ": buf is null with count ", count);
    if (peer < 0 || peer >= size_ || peer == rank_)
      fail(priocclInvalidArgument, what, ": peer ", peer, " is not another rank (this is rank ",
           rank_, " of ", size_, ")");
    auto state = makeOp(buf, buf, count, dtype, priocclSum);
    state->kind = kind;
    state->peer = peer;
    state->tag = tag;
    state->priority = priority;
    state->errorLog = errors_;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      requireLive();
      if (tag < 0 || tag >= engine_->pointToPointTags())
        fail(priocclInvalidArgument, what, ": tag ", tag, " is not in 0..",
             engine_->pointToPointTags() - 1);
    }
    const size_t bytes = count * elem;
    const bool sending = kind == OpState::Kind::kSend;
    std::shared_ptr<OpState> user =
        placeBuffers(*state, {sending ? bytes : 0, sending ? 0 : bytes});
    std::lock_guard<std::mutex> lock(mutex_);
    requireLive();
    submitOrDefer(state, false);
    return Request(user ? user : state);
  }

  // Collective over this communicator's ranks: the ranks with the same color >= 0 get a new
  // communicator over them, ordered by key; color -1 gets none (nullptr). The new one is created
  // with this one's configuration as it was requested (its automatic settings measured anew).
  std::shared_ptr<CommImpl> split(int color, int key) {
    if (!bootstrap_ || destroyed()) failDestroyed();
    // A bad color on one rank must fail every rank, not leave the others in the split.
    std::vector<double> bad{color < -1 ? 1.0 : 0.0};
    bootstrap_->allReduceMax(bad);
    if (color < -1)
      fail(priocclInvalidArgument, "color ", color,
           " is neither >= 0 nor -1 (no new communicator)");
    if (bad[0] != 0)
      fail(priocclInvalidArgument,
           "another rank passed a bad argument to the split (a color below -1, or no place for the "
           "new communicator); no communicator made");
    std::unique_ptr<Bootstrap> part = bootstrap_->split(color, key);
    if (!part) return nullptr;
    return std::make_shared<CommImpl>(requested_, [&] { return std::move(part); });
  }

  // The communicator's failure (the code every later op gets), or success; never blocks.
  priocclResult_t asyncError() {
    std::lock_guard<std::mutex> lock(mutex_);
    requireLive();
    return engine_->asyncError();
  }

  // Under mutex_, with an engine: hands `state` to it, or inside a group (group.h) leaves it
  // for the group's end.
  void submitOrDefer(const std::shared_ptr<OpState>& state, bool callerWaits) {
    if (!group::active()) {
      handOver(state, callerWaits);
      return;
    }
    group::defer(engine_.get(), state,
                 [self = shared_from_this()](std::vector<std::shared_ptr<OpState>>& ops) {
                   std::lock_guard<std::mutex> lock(self->mutex_);
                   self->requireLive();
                   // A waiter drives the engine through its op's gate, a fused member's too
                   // (the engine sets the gate of the ops it is given only).
                   for (auto& op : ops) op->gate = self->engine_->gate();
                   // NCCL's ops read device memory, which fusion's host copies cannot.
                   size_t fusion = self->deviceCollectives_ ? 0 : self->config_.fusionBytes;
                   for (auto& op : fuseAllReduces(std::move(ops), fusion))
                     self->handOver(op, false);
                 });
  }

  // Under mutex_, with an engine: `op` to the engine now, or to the stream gate, which hands it
  // over once its stream (and every op before it in the gate) is ready.
  void handOver(const std::shared_ptr<OpState>& op, bool callerWaits) {
    if (streamGate_->admit(op)) {
      enter(op, callerWaits);
      return;
    }
    // Set before the caller can wait on the op (the gate's thread submits it only under mutex_,
    // which this thread holds): a waiter drives the engine through it (driveUntilDone), also
    // while the op still waits in the gate.
    op->gate = engine_->gate();
  }

  // The stream gate's thread: an op whose stream is ready.
  void handOverWaiting(const std::shared_ptr<OpState>& op) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!streamGate_->take(op)) return;  // failed meanwhile
    try {
      requireLive();
      enter(op, false);
    } catch (const Error& e) {
      op->finish(e.code(), concat(kindName(op->kind), ": ", e.what()));
    }
  }

  // Under mutex_, with an engine: an op whose stream is ready goes in; a staged one starts
  // copying its input.
  void enter(const std::shared_ptr<OpState>& op, bool callerWaits) {
    op->fence.reset();  // its event goes back to the pool
    if (op->staging && stager_) stager_->begin(*op);
    engine_->submit(op, callerWaits);
  }

  priocclCounters_t counters() {
    std::lock_guard<std::mutex> lock(mutex_);
    requireLive();
    return engine_->counters();
  }

  void abort() {
    streamGate_->failAll(priocclInvalidUsage,
                         "the communicator was aborted while the op waited for its stream");
    std::lock_guard<std::mutex> lock(mutex_);  // keeps the engine alive meanwhile
    if (engine_) engine_->abort();
  }

  void destroy() {
    // Ops still waiting for their streams go in first (destroy finishes every pending op), unless
    // a stream never gets there: then they fail, naming the wait.
    if (!destroyed() && !streamGate_->drain(kStreamDrainLimit))
      streamGate_->failAll(
          priocclInvalidUsage,
          concat("the communicator was destroyed while the op waited for the work "
                 "queued on its stream before it, unfinished after ",
                 std::chrono::duration_cast<std::chrono::seconds>(kStreamDrainLimit).count(),
                 " s"));
    std::unique_ptr<Engine> engine;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      engine.swap(engine_);
      destroyed_.store(true, std::memory_order_release);
    }
    if (!engine) return;
    if (!bootstrap_->usable()) {
      // Too late to talk to MPI: leak the engine rather than call MPI after MPI_Finalize.
      (void)engine.release();
      log(LogLevel::kWarn, "communicator destroyed after MPI_Finalize; its resources leak");
      bootstrap_.reset();
      return;
    }
    if (!engine->drainAndStop()) {
      // A transport call has not returned (the communicator failed with priocclTimeout): its
      // thread, the engine and the transport under it leak rather than hang this caller.
      (void)engine.release();
      (void)bootstrap_.release();
      log(LogLevel::kWarn,
          "communicator destroyed while a transport call has not returned; its resources leak");
      return;
    }
    std::shared_ptr<ProgressGate> gate = engine->gate();  // outlives the engine
    engine.reset();  // drains pending ops, joins the progress thread, frees the transport
    std::shared_ptr<DeviceStager> stager;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stager.swap(stager_);
    }
    if (stager) {
      std::lock_guard<std::mutex> lock(gate->mutex);
      stager->trafficEnded(gate->transportQuiesced);
    }
    stager.reset();  // copies back what the drained ops left (or their last holder will)
    // Frees the bootstrap's communicator; finalises MPI if prioccl initialised it and this was
    // the last communicator. Only the thread that took the engine gets here.
    bootstrap_.reset();
  }
  // Read on every call of the API: no lock (the calls that use the engine check again under it).
  bool destroyed() const { return destroyed_.load(std::memory_order_acquire); }

 private:
  std::unique_ptr<Transport> agreeAndConnect() {
    // Settings every rank must share (the parameter table's mustAgree rows), checked before the
    // transport bootstraps: ranks that chose different transports would wait on each other. One
    // all-reduce (max) of +/- each value: equal maxima and minima mean every rank agrees.
    std::vector<double> agree = agreementValues(config_);
    const size_t shared = agree.size();
    // Two entries ride along. Where the launcher's library must not be called concurrently
    // (MPI below MPI_THREAD_MULTIPLE) the idle engine must not call it, so no rank sends
    // heartbeats (a rank with a shorter timeout than a peer's heartbeat period would declare it
    // lost). And the timeline's clock exchange then costs nothing without a timeline, while
    // ranks disagreeing on PRIOCCL_TIMELINE all take part in it (no hang).
    agree.push_back(bootstrap_->concurrentCallsAllowed() ? 0.0 : 1.0);
    agree.push_back(config_.timelinePath.empty() ? 0.0 : 1.0);
    std::vector<double> all = agree;
    bootstrap_->allReduceMax(all);
    heartbeats_ = all[shared] == 0;
    if (std::string why = disagreement(all); !why.empty()) fail(priocclInvalidUsage, why);
    if (all[shared + 1] != 0) timelineClock_ = measureClock(*bootstrap_);
    TransportOptions options;
    options.ucxWakeup = config_.ucxWakeup;
    options.ucxNetDevices = placement_.ucxNetDevices;
    options.socketIfname = config_.socketIfname;
    options.socketSndbuf = config_.socketSndbuf;
    const int myHost = hosts_->hostOf[bootstrap_->rank()];
    for (int host : hosts_->hostOf) options.sameHost.push_back(host == myHost ? 1 : 0);
    return makeTransport(config_.transport, *bootstrap_, options);
  }

  static std::shared_ptr<OpState> makeOp(const void* send, void* recv, size_t count,
                                         priocclDataType_t dtype, priocclRedOp_t op) {
    auto state = std::make_shared<OpState>();
    state->send = send;
    state->recv = recv;
    state->count = count;
    state->dtype = dtype;
    state->op = op;
    return state;
  }

  // An op of the communicator's own, on the calling thread; returns its seconds.
  double runOwn(const void* send, void* recv, size_t count, priocclDataType_t dtype,
                priocclRedOp_t op, priocclAlgorithm_t algo) {
    auto state = makeOp(send, recv, count, dtype, op);
    state->algorithm = algo;
    auto t0 = std::chrono::steady_clock::now();
    engine_->submit(state, true);
    Request(state).wait();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // Every rank must cut ops alike and choose algorithms alike (the settings that decide it were
  // compared in agreeAndConnect); then (auto algorithm) fit the cost model. The model is measured
  // once per process and group of ranks, so that communicators over the same ranks choose alike
  // (and so give the same bits); it is reused only when every rank has it.
  void agreeAndCalibrate(const std::vector<int>& processIds) {
    std::vector<int> key = processIds;
    key.push_back(static_cast<int>(config_.chunkBytes));
    key.push_back(static_cast<int>(config_.transport));  // each transport has its own costs
    // ... and each host layout its own levels (and whether hier is a candidate at all).
    key.insert(key.end(), hosts_->hostOf.begin(), hosts_->hostOf.end());
    const AlgoSelector* known = calibration::known(key);
    // chunkBytes and the algorithm were checked with the other shared settings (agreeAndConnect):
    // what is left is whether every rank already has this group's model.
    double have = known ? 1 : 0;
    double mine[2] = {have, -have}, all[2];  // maxima: all[1] is minus the minimum
    // A collective backend runs the library's own algorithms: nothing to choose or time. Its ops
    // may need device buffers (NCCL), so this exchange goes over the bootstrap there.
    if (collectiveBackend_) {
      std::vector<double> v(mine, mine + 2);
      bootstrap_->allReduceMax(v);
      all[0] = v[0];
      all[1] = v[1];
    } else {
      runOwn(mine, all, 2, priocclFloat64, priocclMax, priocclAlgoRecursiveDoubling);
    }
    std::vector<AlgoRule> byRule =
        parseAlgorithmRules("config.algorithmRules", config_.algorithmRules);
    selector_ = AlgoSelector(config_.algorithm);
    selector_.setPolicy(config_.algorithm, byRule);
    selector_.setLink(config_.linkBytesPerSecond, size_);  // the same on every rank
    selector_.setLevels(levels_);                          // ... and these too
    if (selector_.usesModel() && config_.calibrate && size_ > 1 && !collectiveBackend_) {
      if (all[1] == -1) {  // every rank has measured this group already
        // The model comes with the link figure it was stored with (the cost model's floor):
        // this communicator's own link measurement differs on a busy machine, and a different
        // floor would choose another algorithm near a crossover, and so other bits.
        selector_ = *known;  // measured under another communicator's policy: set ours
        selector_.setPolicy(config_.algorithm, byRule);
      } else {
        calibration::measure(
            selector_, size_, hosts_->twoLevel(),
            [this](const void* send, void* recv, size_t count, priocclDataType_t dtype,
                   priocclRedOp_t op,
                   priocclAlgorithm_t algo) { return runOwn(send, recv, count, dtype, op, algo); });
        calibration::remember(key, selector_);
      }
    }
    engine_->setSelector(selector_);
  }

  // PRIOCCL_DEBUG=INFO: one line per host, from its lowest rank.
  void logHost(const HostGroups& hosts) {
    const int me = bootstrap_->rank(), h = hosts.layout.hostOf[me];
    const std::vector<int>& members = hosts.layout.members[h];
    if (members.front() != me || logLevel() < LogLevel::kInfo) return;
    std::string ranks;
    for (int r : members) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    log(LogLevel::kInfo, "host ", h, " (", hosts.names[h], "): ranks ", ranks, " of ",
        hosts.layout.describe(), "; ", placement_.describe());
  }

  // The progress thread near the network device, inside the rank's binding (placement.h). A
  // refusal (a cgroup narrower than the affinity mask says) leaves it where it was.
  void bindProgressThread() {
    if (placement_.progressCpus.empty()) return;
    std::string why;
    if (!topology::bindThread(engine_->progressThread(), placement_.progressCpus, &why))
      log(LogLevel::kWarn, "PRIOCCL_PLACEMENT: the progress thread keeps its CPUs: ", why);
  }

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

}  // namespace detail

using detail::fail;

// ---- Request ----

namespace {
detail::OpState& stateOf(const std::shared_ptr<detail::OpState>& s) {
  if (!s) fail(priocclInvalidUsage, "empty Request (default-constructed or moved from)");
  return *s;
}
void throwIfFailed(detail::OpState& s) {
  if (s.result != priocclSuccess) detail::raise(s.result, s.error);
}
}  // namespace

void Request::wait() const {
  detail::OpState& s = stateOf(state_);
  detail::driveUntilDone(s);
  std::unique_lock<std::mutex> lock(s.mutex);
  s.cv.wait(lock, [&] { return s.done.load(std::memory_order_acquire); });
  throwIfFailed(s);
}

bool Request::test() const {
  detail::OpState& s = stateOf(state_);
  if (!s.done.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(s.mutex);
  throwIfFailed(s);
  return true;
}

priocclResult_t Request::status(std::string* error) const {
  detail::OpState& s = stateOf(state_);
  if (!s.done.load(std::memory_order_acquire)) return priocclInProgress;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (error) *error = s.error;
  return s.result;
}

void Request::onComplete(Callback cb) const {
  detail::OpState& s = stateOf(state_);
  if (!cb) fail(priocclInvalidArgument, "onComplete needs a callable");
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.done.load(std::memory_order_acquire)) {
      s.callbacks.push_back(std::move(cb));
      return;
    }
  }
  cb(s.result, s.error);
}

void Request::streamWait(void* stream) const {
  detail::OpState& s = stateOf(state_);
  if (s.done.load(std::memory_order_acquire)) return;
  device::DeviceMemory* memory = device::current();
  if (!memory)
    fail(priocclInvalidUsage,
         "streamWait: no CUDA in this process (no stream can wait: wait for the request)");
  std::shared_ptr<device::StreamHold> held = memory->hold(stream);
  onComplete([held](priocclResult_t, const std::string&) { held->release(); });
}

// ---- Communicator ----

Communicator Communicator::world(const Config& config) {
  return fromMpi(nullptr, config);
}

Communicator Communicator::fromMpi(const void* mpiComm, const Config& config) {
  return Communicator(std::make_shared<detail::CommImpl>(
      config, [&] { return makeMpiBootstrap(mpiComm, config.requireThreadMultiple); }));
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
  detail::validateEnums(datatype, op);  // first: later code loads them as enums
  return impl().collectiveAsync(detail::OpState::Kind::kAllReduce, sendbuf, recvbuf, count,
                                datatype, op, -1, priority, nullptr);
}

Request Communicator::allReduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     priocclDataType_t datatype, priocclRedOp_t op, int priority,
                                     const std::string& key) {
  detail::validateEnums(datatype, op);
  return impl().collectiveAsync(detail::OpState::Kind::kAllReduce, sendbuf, recvbuf, count,
                                datatype, op, -1, priority, &key);
}

Request Communicator::broadcastAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     priocclDataType_t datatype, int root, int priority) {
  detail::validateEnums(datatype, priocclSum);
  return impl().collectiveAsync(detail::OpState::Kind::kBroadcast, sendbuf, recvbuf, count,
                                datatype, priocclSum, root, priority, nullptr);
}

Request Communicator::broadcastAsync(const void* sendbuf, void* recvbuf, size_t count,
                                     priocclDataType_t datatype, int root, int priority,
                                     const std::string& key) {
  detail::validateEnums(datatype, priocclSum);
  return impl().collectiveAsync(detail::OpState::Kind::kBroadcast, sendbuf, recvbuf, count,
                                datatype, priocclSum, root, priority, &key);
}

Request Communicator::reduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                  priocclDataType_t datatype, priocclRedOp_t op, int root,
                                  int priority) {
  detail::validateEnums(datatype, op);
  return impl().collectiveAsync(detail::OpState::Kind::kReduce, sendbuf, recvbuf, count, datatype,
                                op, root, priority, nullptr);
}

Request Communicator::reduceAsync(const void* sendbuf, void* recvbuf, size_t count,
                                  priocclDataType_t datatype, priocclRedOp_t op, int root,
                                  int priority, const std::string& key) {
  detail::validateEnums(datatype, op);
  return impl().collectiveAsync(detail::OpState::Kind::kReduce, sendbuf, recvbuf, count, datatype,
                                op, root, priority, &key);
}

void Communicator::reduce(const void* sendbuf, void* recvbuf, size_t count,
                          priocclDataType_t datatype, priocclRedOp_t op, int root) {
  detail::validateEnums(datatype, op);
  detail::group::waitOrDefer(impl().collectiveAsync(detail::OpState::Kind::kReduce, sendbuf,
                                                    recvbuf, count, datatype, op, root, 0, nullptr,
                                                    true));
}

Request Communicator::allGatherAsync(const void* sendbuf, void* recvbuf, size_t sendcount,
                                     priocclDataType_t datatype, int priority) {
  detail::validateEnums(datatype, priocclSum);
  return impl().collectiveAsync(detail::OpState::Kind::kAllGather, sendbuf, recvbuf, sendcount,
                                datatype, priocclSum, -1, priority, nullptr);
}

Request Communicator::allGatherAsync(const void* sendbuf, void* recvbuf, size_t sendcount,
                                     priocclDataType_t datatype, int priority,
                                     const std::string& key) {
  detail::validateEnums(datatype, priocclSum);
  return impl().collectiveAsync(detail::OpState::Kind::kAllGather, sendbuf, recvbuf, sendcount,
                                datatype, priocclSum, -1, priority, &key);
}

void Communicator::allGather(const void* sendbuf, void* recvbuf, size_t sendcount,
                             priocclDataType_t datatype) {
  detail::validateEnums(datatype, priocclSum);
  detail::group::waitOrDefer(impl().collectiveAsync(detail::OpState::Kind::kAllGather, sendbuf,
                                                    recvbuf, sendcount, datatype, priocclSum, -1, 0,
                                                    nullptr, true));
}

Request Communicator::reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvcount,
                                         priocclDataType_t datatype, priocclRedOp_t op,
                                         int priority) {
  detail::validateEnums(datatype, op);
  return impl().collectiveAsync(detail::OpState::Kind::kReduceScatter, sendbuf, recvbuf, recvcount,
                                datatype, op, -1, priority, nullptr);
}

Request Communicator::reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvcount,
                                         priocclDataType_t datatype, priocclRedOp_t op,
                                         int priority, const std::string& key) {
  detail::validateEnums(datatype, op);
  return impl().collectiveAsync(detail::OpState::Kind::kReduceScatter, sendbuf, recvbuf, recvcount,
                                datatype, op, -1, priority, &key);
}

void Communicator::reduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                 priocclDataType_t datatype, priocclRedOp_t op) {
  detail::validateEnums(datatype, op);
  detail::group::waitOrDefer(impl().collectiveAsync(detail::OpState::Kind::kReduceScatter, sendbuf,
                                                    recvbuf, recvcount, datatype, op, -1, 0,
                                                    nullptr, true));
}

Request Communicator::allToAllAsync(const void* sendbuf, void* recvbuf, size_t count,
                                    priocclDataType_t datatype, int priority) {
  detail::validateEnums(datatype, priocclSum);
  return impl().collectiveAsync(detail::OpState::Kind::kAllToAll, sendbuf, recvbuf, count, datatype,
                                priocclSum, -1, priority, nullptr);
}

Request Communicator::allToAllAsync(const void* sendbuf, void* recvbuf, size_t count,
                                    priocclDataType_t datatype, int priority,
                                    const std::string& key) {
  detail::validateEnums(datatype, priocclSum);
  return impl().collectiveAsync(detail::OpState::Kind::kAllToAll, sendbuf, recvbuf, count, datatype,
                                priocclSum, -1, priority, &key);
}

void Communicator::allToAll(const void* sendbuf, void* recvbuf, size_t count,
                            priocclDataType_t datatype) {
  detail::validateEnums(datatype, priocclSum);
  detail::group::waitOrDefer(impl().collectiveAsync(detail::OpState::Kind::kAllToAll, sendbuf,
                                                    recvbuf, count, datatype, priocclSum, -1, 0,
                                                    nullptr, true));
}

Request Communicator::allGatherVAsync(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                      const size_t* displs, priocclDataType_t datatype,
                                      int priority) {
  detail::validateEnums(datatype, priocclSum);
  return impl().collectiveVAsync(detail::OpState::Kind::kAllGatherV, sendbuf, recvbuf, nullptr,
                                 nullptr, recvcounts, displs, datatype, priocclSum, priority,
                                 nullptr);
}

Request Communicator::allGatherVAsync(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                      const size_t* displs, priocclDataType_t datatype,
                                      int priority, const std::string& key) {
  detail::validateEnums(datatype, priocclSum);
  return impl().collectiveVAsync(detail::OpState::Kind::kAllGatherV, sendbuf, recvbuf, nullptr,
                                 nullptr, recvcounts, displs, datatype, priocclSum, priority, &key);
}

void Communicator::allGatherV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                              const size_t* displs, priocclDataType_t datatype) {
  detail::validateEnums(datatype, priocclSum);
  detail::group::waitOrDefer(impl().collectiveVAsync(detail::OpState::Kind::kAllGatherV, sendbuf,
                                                     recvbuf, nullptr, nullptr, recvcounts, displs,
                                                     datatype, priocclSum, 0, nullptr, true));
}

Request Communicator::reduceScatterVAsync(const void* sendbuf, void* recvbuf,
                                          const size_t* recvcounts, priocclDataType_t datatype,
                                          priocclRedOp_t op, int priority) {
  detail::validateEnums(datatype, op);
  return impl().collectiveVAsync(detail::OpState::Kind::kReduceScatterV, sendbuf, recvbuf, nullptr,
                                 nullptr, recvcounts, nullptr, datatype, op, priority, nullptr);
}

Request Communicator::reduceScatterVAsync(const void* sendbuf, void* recvbuf,
                                          const size_t* recvcounts, priocclDataType_t datatype,
                                          priocclRedOp_t op, int priority, const std::string& key) {
  detail::validateEnums(datatype, op);
  return impl().collectiveVAsync(detail::OpState::Kind::kReduceScatterV, sendbuf, recvbuf, nullptr,
                                 nullptr, recvcounts, nullptr, datatype, op, priority, &key);
}

void Communicator::reduceScatterV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                  priocclDataType_t datatype, priocclRedOp_t op) {
  detail::validateEnums(datatype, op);
  detail::group::waitOrDefer(impl().collectiveVAsync(detail::OpState::Kind::kReduceScatterV,
                                                     sendbuf, recvbuf, nullptr, nullptr, recvcounts,
                                                     nullptr, datatype, op, 0, nullptr, true));
}

Request Communicator::allToAllVAsync(const void* sendbuf, const size_t* sendcounts,
                                     const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                                     const size_t* rdispls, priocclDataType_t datatype,
                                     int priority) {
  detail::validateEnums(datatype, priocclSum);
  return impl().collectiveVAsync(detail::OpState::Kind::kAllToAllV, sendbuf, recvbuf, sendcounts,
                                 sdispls, recvcounts, rdispls, datatype, priocclSum, priority,
                                 nullptr);
}

Request Communicator::allToAllVAsync(const void* sendbuf, const size_t* sendcounts,
                                     const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                                     const size_t* rdispls, priocclDataType_t datatype,
                                     int priority, const std::string& key) {
  detail::validateEnums(datatype, priocclSum);
  return impl().collectiveVAsync(detail::OpState::Kind::kAllToAllV, sendbuf, recvbuf, sendcounts,
                                 sdispls, recvcounts, rdispls, datatype, priocclSum, priority,
                                 &key);
}

void Communicator::allToAllV(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                             void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                             priocclDataType_t datatype) {
  detail::validateEnums(datatype, priocclSum);
  detail::group::waitOrDefer(impl().collectiveVAsync(
      detail::OpState::Kind::kAllToAllV, sendbuf, recvbuf, sendcounts, sdispls, recvcounts, rdispls,
      datatype, priocclSum, 0, nullptr, true));
}

Request Communicator::barrierAsync(int priority) {
  return impl().collectiveAsync(detail::OpState::Kind::kBarrier, nullptr, nullptr, 0, priocclUint8,
                                priocclSum, -1, priority, nullptr);
}

Request Communicator::barrierAsync(int priority, const std::string& key) {
  return impl().collectiveAsync(detail::OpState::Kind::kBarrier, nullptr, nullptr, 0, priocclUint8,
                                priocclSum, -1, priority, &key);
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
  detail::group::waitOrDefer(impl().collectiveAsync(detail::OpState::Kind::kBarrier, nullptr,
                                                    nullptr, 0, priocclUint8, priocclSum, -1, 0,
                                                    nullptr, true));
}

void Communicator::broadcast(const void* sendbuf, void* recvbuf, size_t count,
                             priocclDataType_t datatype, int root) {
  detail::validateEnums(datatype, priocclSum);
  detail::group::waitOrDefer(impl().collectiveAsync(detail::OpState::Kind::kBroadcast, sendbuf,
                                                    recvbuf, count, datatype, priocclSum, root, 0,
                                                    nullptr, true));
}

Request Communicator::sendAsync(const void* buf, size_t count, priocclDataType_t datatype, int peer,
                                int tag, int priority) {
  detail::validateEnums(datatype, priocclSum);
  // The engine only reads a send's buffer.
  return impl().pointToPoint(detail::OpState::Kind::kSend, const_cast<void*>(buf), count, datatype,
                             peer, tag, priority);
}

Request Communicator::recvAsync(void* buf, size_t count, priocclDataType_t datatype, int peer,
                                int tag, int priority) {
  detail::validateEnums(datatype, priocclSum);
  return impl().pointToPoint(detail::OpState::Kind::kRecv, buf, count, datatype, peer, tag,
                             priority);
}

priocclCounters_t Communicator::counters() const {
  return impl().counters();
}

void Communicator::allReduce(const void* sendbuf, void* recvbuf, size_t count,
                             priocclDataType_t datatype, priocclRedOp_t op) {
  detail::validateEnums(datatype, op);  // before passing them on by value (a load)
  detail::group::waitOrDefer(impl().collectiveAsync(detail::OpState::Kind::kAllReduce, sendbuf,
                                                    recvbuf, count, datatype, op, -1, 0, nullptr,
                                                    true));
}

void Communicator::abort() {
  if (impl_) impl_->abort();
}

void Communicator::destroy() {
  if (impl_) impl_->destroy();
}

}  // namespace prioccl
