// The training modes' C ABI: handles in tables (a destroyed object is reported, never
// dereferenced), every failure a result code plus priocclGetLastError's message.
#include <memory>

#include "api/c_api_support.h"
#include "api/op_rules.h"
#include "common/error.h"
#include "device/device_memory.h"
#include "prioccl/modes.hpp"
#include "reduce/reduce.h"

namespace prioccl {
namespace {

using capi::guarded;
using LaggedPtr = std::shared_ptr<LaggedAllReduce>;
using DelayedPtr = std::shared_ptr<DelayedSgd>;
using GatePtr = std::shared_ptr<LayerGate>;

capi::HandleTable<LaggedPtr, capi::kLaggedHandle>& laggeds() {
  static capi::HandleTable<LaggedPtr, capi::kLaggedHandle> table;
  return table;
}
capi::HandleTable<DelayedPtr, capi::kDelayedHandle>& delayeds() {
  static capi::HandleTable<DelayedPtr, capi::kDelayedHandle> table;
  return table;
}

capi::HandleTable<GatePtr, capi::kGateHandle>& gates() {
  static capi::HandleTable<GatePtr, capi::kGateHandle> table;
  return table;
}

constexpr const char* kDead = "is not live (destroyed or never created)";
constexpr const char* kDestroyed = "is not live (already destroyed?)";

template <typename T>
void requireOut(T* p, const char* name) {
  if (!p) detail::fail(priocclInvalidArgument, name, " is NULL");
}

}  // namespace
}  // namespace prioccl

using namespace prioccl;

extern "C" {

priocclResult_t priocclLaggedCreate(priocclComm_t comm, size_t count, priocclDataType_t datatype,
                                    priocclRedOp_t op, int warmupSteps, int priority,
                                    const char* key, priocclLagged_t* lagged) {
  return guarded(__func__, comm, [&] {
    requireOut(lagged, "lagged");
    *lagged = nullptr;
    detail::validateEnums(datatype, op);
    LaggedAllReduce::Options o;
    o.warmupSteps = warmupSteps;
    o.priority = priority;
    if (key) o.key = key;
    auto object = std::make_shared<LaggedAllReduce>(capi::lookup(comm), count, datatype, op, o);
    *lagged = reinterpret_cast<priocclLagged_t>(laggeds().add(std::move(object)));
  });
}

priocclResult_t priocclLaggedStep(priocclLagged_t lagged, const void* grads, void* out,
                                  int* hasResult) {
  return guarded(__func__, nullptr, [&] {
    requireOut(hasResult, "hasResult");
    *hasResult = 0;
    *hasResult = laggeds().get(lagged, "lagged", kDead)->step(grads, out) ? 1 : 0;
  });
}

priocclResult_t priocclLaggedFlush(priocclLagged_t lagged, void* out, int* hasResult) {
  return guarded(__func__, nullptr, [&] {
    requireOut(hasResult, "hasResult");
    *hasResult = 0;
    *hasResult = laggeds().get(lagged, "lagged", kDead)->flush(out) ? 1 : 0;
  });
}

priocclResult_t priocclLaggedResult(priocclLagged_t lagged, const void** result) {
  return guarded(__func__, nullptr, [&] {
    requireOut(result, "result");
    *result = laggeds().get(lagged, "lagged", kDead)->result();
  });
}

priocclResult_t priocclLaggedDestroy(priocclLagged_t lagged) {
  return guarded(__func__, nullptr,
                 [&] { laggeds().release(lagged, "lagged", kDestroyed)->destroy(); });
}

priocclResult_t priocclSwitchDecayLrRatio(long step, long warmupSteps, double* ratio) {
  return guarded(__func__, nullptr, [&] {
    requireOut(ratio, "ratio");
    *ratio = switchDecayLrRatio(step, warmupSteps);
  });
}

priocclResult_t priocclDelayedCreate(priocclComm_t comm, float* weights, size_t count,
                                     const priocclDelayedConfig_t* config, const char* key,
                                     priocclDelayed_t* delayed) {
  return guarded(__func__, comm, [&] {
    requireOut(delayed, "delayed");
    *delayed = nullptr;
    requireOut(config, "config");
    device::requireHost(weights, "weights", "delayed create");
    DelayedSgd::Options o;
    o.k = config->k;
    o.sgd.lr = config->lr;
    o.sgd.momentum = config->momentum;
    o.sgd.weightDecay = config->weightDecay;
    o.alpha = config->alpha;
    o.beta = config->beta;
    o.localLr = config->localLr;
    o.warmupSteps = config->warmupSteps;
    o.priority = config->priority;
    if (key) o.key = key;
    auto object = std::make_shared<DelayedSgd>(capi::lookup(comm), weights, count, o);
    *delayed = reinterpret_cast<priocclDelayed_t>(delayeds().add(std::move(object)));
  });
}

priocclResult_t priocclDelayedStep(priocclDelayed_t delayed, const float* grads, int* synced) {
  return guarded(__func__, nullptr, [&] {
    requireOut(synced, "synced");
    *synced = 0;
    device::requireHost(grads, "grads", "delayed step");
    *synced = delayeds().get(delayed, "delayed", kDead)->step(grads) ? 1 : 0;
  });
}

priocclResult_t priocclDelayedSetLearningRate(priocclDelayed_t delayed, double lr, double localLr) {
  return guarded(__func__, nullptr,
                 [&] { delayeds().get(delayed, "delayed", kDead)->setLearningRate(lr, localLr); });
}

priocclResult_t priocclDelayedFlush(priocclDelayed_t delayed) {
  return guarded(__func__, nullptr, [&] { delayeds().get(delayed, "delayed", kDead)->flush(); });
}

priocclResult_t priocclDelayedDestroy(priocclDelayed_t delayed) {
  return guarded(__func__, nullptr,
                 [&] { delayeds().release(delayed, "delayed", kDestroyed)->destroy(); });
}

priocclResult_t priocclGateCreate(priocclComm_t comm, int layers, const char* key,
                                  priocclGate_t* gate) {
  return guarded(__func__, comm, [&] {
    requireOut(gate, "gate");
    *gate = nullptr;
    auto object =
        std::make_shared<LayerGate>(capi::lookup(comm), layers, key ? key : "prioccl.gate");
    *gate = reinterpret_cast<priocclGate_t>(gates().add(std::move(object)));
  });
}

priocclResult_t priocclGateSubmit(priocclGate_t gate, int layer, const void* sendbuff,
                                  void* recvbuff, size_t count, priocclDataType_t datatype,
                                  priocclRedOp_t op) {
  return guarded(__func__, nullptr, [&] {
    detail::validateEnums(datatype, op);
    gates().get(gate, "gate", kDead)->submit(layer, sendbuff, recvbuff, count, datatype, op);
  });
}

priocclResult_t priocclGateWait(priocclGate_t gate, int layer, int* submitted) {
  return guarded(__func__, nullptr, [&] {
    requireOut(submitted, "submitted");
    *submitted = 0;
    *submitted = gates().get(gate, "gate", kDead)->wait(layer) ? 1 : 0;
  });
}

priocclResult_t priocclGateWaitAll(priocclGate_t gate) {
  return guarded(__func__, nullptr, [&] { gates().get(gate, "gate", kDead)->waitAll(); });
}

priocclResult_t priocclGateDestroy(priocclGate_t gate) {
  return guarded(__func__, nullptr, [&] { gates().release(gate, "gate", kDestroyed)->waitAll(); });
}

namespace {
// Checked through its bits before the enum is read as one: a C or ctypes caller may pass any int.
void requireValidDtype(const priocclDataType_t& datatype) {
  if (!reduce::isValidDtype(detail::enumBits(datatype)))
    detail::fail(priocclInvalidArgument, "invalid datatype ", detail::enumBits(datatype));
}
}  // namespace

priocclResult_t priocclGluUpdate(void* weights, const void* grads, const void* preWeights,
                                 size_t count, priocclDataType_t datatype, double localLr,
                                 double alpha, double beta, double weightDecay, double momentum,
                                 double lr, int k) {
  return guarded(__func__, nullptr, [&] {
    GluParams p;
    p.localLr = localLr;
    p.alpha = alpha;
    p.beta = beta;
    p.weightDecay = weightDecay;
    p.momentum = momentum;
    p.lr = lr;
    p.k = k;
    requireValidDtype(datatype);
    for (const void* b : {static_cast<const void*>(weights), grads, preWeights})
      device::requireHost(b, "a buffer", "GLU update");
    gluUpdate(weights, grads, preWeights, count, datatype, p);
  });
}

priocclResult_t priocclSgdUpdate(void* weights, void* velocity, const void* grads, size_t count,
                                 priocclDataType_t datatype, double lr, double momentum,
                                 double weightDecay) {
  return guarded(__func__, nullptr, [&] {
    SgdParams p;
    p.lr = lr;
    p.momentum = momentum;
    p.weightDecay = weightDecay;
    requireValidDtype(datatype);
    for (const void* b :
         {static_cast<const void*>(weights), static_cast<const void*>(velocity), grads})
      device::requireHost(b, "a buffer", "SGD update");
    sgdUpdate(weights, velocity, grads, count, datatype, p);
  });
}

priocclResult_t priocclSpecTrainPredict(void* predicted, const void* weights, const void* velocity,
                                        size_t count, priocclDataType_t datatype, double lr,
                                        double staleness) {
  return guarded(__func__, nullptr, [&] {
    requireValidDtype(datatype);
    for (const void* b : {static_cast<const void*>(predicted), weights, velocity})
      device::requireHost(b, "a buffer", "SpecTrain predict");
    specTrainPredict(predicted, weights, velocity, count, datatype, lr, staleness);
  });
}

priocclResult_t priocclSpecTrainStaleness(int stage, int stages, int forward, int* staleness) {
  return guarded(__func__, nullptr, [&] {
    requireOut(staleness, "staleness");
    *staleness = specTrainStaleness(stage, stages, forward != 0);
  });
}

priocclResult_t priocclSpecTrainStalenessRule(int stage, int stages, int forward, int rule,
                                              int* staleness) {
  return guarded(__func__, nullptr, [&] {
    requireOut(staleness, "staleness");
    // Any int converts to the enum (its underlying type is int); specTrainStaleness rejects
    // values that are not a rule.
    *staleness = specTrainStaleness(stage, stages, forward != 0, static_cast<StalenessRule>(rule));
  });
}

}  // extern "C"
