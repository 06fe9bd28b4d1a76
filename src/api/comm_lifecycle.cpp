// CommImpl's life (comm_impl.h): creation (settings agreed across ranks, host groups, the
// transport, the engine, the cost model), split, the communicator's own monitoring calls, abort
// and teardown.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "api/calibration.h"
#include "api/clock_sync.h"
#include "api/comm_impl.h"
#include "api/params.h"
#include "common/log.h"

namespace prioccl::detail {

namespace {

// Where a creation spends its time, for PRIOCCL_DEBUG=INFO's one "init timings" line (NCCL logs
// the same): the stages in order, each in milliseconds since the previous mark.
class StageClock {
 public:
  void mark(const char* stage) {
    auto now = std::chrono::steady_clock::now();
    text_ += concat(text_.empty() ? "" : ", ", stage, " ",
                    fixed(std::chrono::duration<double, std::milli>(now - last_).count()));
    last_ = now;
  }
  std::string summary() const {
    double total = std::chrono::duration<double, std::milli>(last_ - start_).count();
    return concat("init timings (ms): total ", fixed(total), " (", text_, ")");
  }

 private:
  static std::string fixed(double ms) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.2f", ms);
    return buffer;
  }
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
  std::string text_;
};

}  // namespace

void failDestroyed() {
  fail(priocclInvalidUsage, "communicator has been destroyed");
}

CommImpl::CommImpl(const Config& config,
                   const std::function<std::unique_ptr<Bootstrap>()>& makeBootstrap)
    : config_(config), requested_(config), errors_(std::make_shared<ErrorLog>()) {
  validateConfig(config_);  // the parameter table's ranges
  StageClock clock;
  // Members are destroyed in reverse: on a throw below, the engine goes before the bootstrap.
  bootstrap_ = makeBootstrap();
  clock.mark("bootstrap");
  // PRIOCCL_DEBUG_FILE's %r: lines logged from here on know their rank.
  setLogRank(bootstrap_->processIds()[static_cast<size_t>(bootstrap_->rank())]);
  LinkEstimate link = measureRingLink(*bootstrap_);
  clock.mark("link");
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
  config_.resolveAuto(link.bytesPerSecond, link.latencySeconds, link.nranks, hosts_->hosts() == 1);
  // One rank per host on several hosts behind links of the slow class (below ~5 Gbit/s):
  // prioccl's own sockets read each message straight into its buffer where MPI's TCP path
  // copies it (docs/benchmarks.md, "TCP transport"). Within a host MPI's shared memory stays,
  // and on faster links MPI's own fabric (verbs, UCX) may beat sockets: not measured, so MPI.
  // The layout and the link class are the same on every rank, and so the choice.
  // Without MPI (a unique id's TCP bootstrap) UCX takes MPI's place where this build has it.
  if (config_.transport == priocclTransportAuto)
    config_.transport = config_.slowLinks && hosts_->hosts() == bootstrap_->size()
                            ? priocclTransportTcp
                        : launchedByMpi(*bootstrap_)                   ? priocclTransportMpi
                        : (buildFeatures() & PRIOCCL_FEATURE_UCX) != 0 ? priocclTransportUcx
                                                                       : priocclTransportTcp;
  levels_ = measureHostLevels(*bootstrap_, *hosts_);
  clock.mark("hosts");
  placement_ = choosePlacement(config_.placement, std::getenv("UCX_NET_DEVICES"));
  logHost(hosts);
  std::unique_ptr<Transport> transport = agreeAndConnect();
  clock.mark("transport");
  rank_ = transport->rank();
  size_ = transport->size();
  if (rank_ == 0)
    log(LogLevel::kInfo, "prioccl ", PRIOCCL_MAJOR, ".", PRIOCCL_MINOR, ".", PRIOCCL_PATCH,
        " nranks=", size_, " ", config_.describe());
  std::unique_ptr<CollBackend> collectives = makeCollBackend(config_.transport, *bootstrap_);
  collectiveBackend_ = collectives != nullptr;
  deviceCollectives_ = collectives && collectives->deviceBuffers();
  engine_ = std::make_unique<Engine>(std::move(transport), config_, selector_, errors_, heartbeats_,
                                     timelineClock_, std::move(collectives), hosts_);
  bindProgressThread();
  clock.mark("engine");
  agreeAndCalibrate(bootstrap_->processIds());
  engine_->startApplication();  // counters and op numbers are the application's
  clock.mark("calibration");
  if (rank_ == 0) {
    log(LogLevel::kInfo, "algorithm model: ", selector_.describe());
    log(LogLevel::kInfo, clock.summary());
  }
}

std::string CommImpl::startTimeline(const std::string& path) {
  if (path.empty()) fail(priocclInvalidArgument, "startTimeline: the path is empty");
  std::lock_guard<std::mutex> lock(mutex_);
  requireLive();
  std::string file = engine_->startTimeline(path);
  if (file.empty())
    fail(priocclSystemError, "startTimeline: cannot write the timeline at ", path,
         " (the log says why)");
  return file;
}

void CommImpl::stopTimeline() {
  std::lock_guard<std::mutex> lock(mutex_);
  requireLive();
  engine_->stopTimeline();
}

std::shared_ptr<CommImpl> CommImpl::split(int color, int key) {
  if (!bootstrap_ || destroyed()) failDestroyed();
  // A bad color on one rank must fail every rank, not leave the others in the split.
  std::vector<double> bad{color < -1 ? 1.0 : 0.0};
  bootstrap_->allReduceMax(bad);
  if (color < -1)
    fail(priocclInvalidArgument, "color ", color, " is neither >= 0 nor -1 (no new communicator)");
  if (bad[0] != 0)
    fail(priocclInvalidArgument,
         "another rank passed a bad argument to the split (a color below -1, or no place for the "
         "new communicator); no communicator made");
  std::unique_ptr<Bootstrap> part = bootstrap_->split(color, key);
  if (!part) return nullptr;
  return std::make_shared<CommImpl>(requested_, [&] { return std::move(part); });
}

std::shared_ptr<CommImpl> CommImpl::shrink(const std::vector<int>* excluded, const Config* config) {
  if (!bootstrap_ || destroyed()) failDestroyed();
  std::unique_ptr<Bootstrap> part =
      excluded ? bootstrap_->shrink(*excluded) : bootstrap_->shrinkToLive();
  return std::make_shared<CommImpl>(config ? *config : requested_, [&] { return std::move(part); });
}

priocclResult_t CommImpl::asyncError() {
  std::lock_guard<std::mutex> lock(mutex_);
  requireLive();
  return engine_->asyncError();
}

priocclCounters_t CommImpl::counters() {
  std::lock_guard<std::mutex> lock(mutex_);
  requireLive();
  return engine_->counters();
}

void CommImpl::abort() {
  streamGate_->failAll(priocclInvalidUsage,
                       "the communicator was aborted while the op waited to enter it (for its "
                       "stream, or for the sizes of a ragged op)");
  std::lock_guard<std::mutex> lock(mutex_);  // keeps the engine alive meanwhile
  if (engine_) engine_->abort();
}

void CommImpl::destroy() {
  // Ops still waiting for their streams go in first (destroy finishes every pending op), unless
  // a stream never gets there: then they fail, naming the wait.
  if (!destroyed() && !streamGate_->drain(kStreamDrainLimit))
    streamGate_->failAll(
        priocclInvalidUsage,
        concat("the communicator was destroyed while the op waited to enter it (for the work "
               "queued on its stream before it, or for the sizes of a ragged op), unfinished "
               "after ",
               std::chrono::duration_cast<std::chrono::seconds>(kStreamDrainLimit).count(), " s"));
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

std::unique_ptr<Transport> CommImpl::agreeAndConnect() {
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

double CommImpl::runOwn(const void* send, void* recv, size_t count, priocclDataType_t dtype,
                        priocclRedOp_t op, priocclAlgorithm_t algo) {
  auto state = makeOp(send, recv, count, dtype, op);
  state->algorithm = algo;
  auto t0 = std::chrono::steady_clock::now();
  engine_->submit(state, true);
  Request(state).wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void CommImpl::agreeAndCalibrate(const std::vector<int>& processIds) {
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

void CommImpl::logHost(const HostGroups& hosts) {
  const int me = bootstrap_->rank(), h = hosts.layout.hostOf[me];
  const std::vector<int>& members = hosts.layout.members[h];
  if (members.front() != me || logLevel() < LogLevel::kInfo) return;
  std::string ranks;
  for (int r : members) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  log(LogLevel::kInfo, "host ", h, " (", hosts.names[h], "): ranks ", ranks, " of ",
      hosts.layout.describe(), "; ", placement_.describe());
}

void CommImpl::bindProgressThread() {
  if (placement_.progressCpus.empty()) return;
  std::string why;
  if (!topology::bindThread(engine_->progressThread(), placement_.progressCpus, &why))
    log(LogLevel::kWarn, "PRIOCCL_PLACEMENT: the progress thread keeps its CPUs: ", why);
}

}  // namespace prioccl::detail
