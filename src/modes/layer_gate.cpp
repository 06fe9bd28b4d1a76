// P3's per-layer gate: one named all-reduce per layer and iteration, priority = layer index.
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "modes/agree.h"
#include "prioccl/modes.hpp"

namespace prioccl {

using detail::fail;

struct LayerGate::State {
  Communicator comm;
  std::string key;
  std::vector<std::optional<Request>> inFlight;  // per layer

  std::optional<Request>& slot(int layer, const char* what) {
    if (layer < 0 || layer >= static_cast<int>(inFlight.size()))
      fail(priocclInvalidArgument, "LayerGate::", what, ": layer ", layer, " is not in 0..",
           inFlight.size() - 1, " (gate '", key, "')");
    return inFlight[static_cast<size_t>(layer)];
  }
};

LayerGate::LayerGate(const Communicator& comm, int layers, const std::string& key)
    : s_(std::make_unique<State>()) {
  if (!comm.valid()) fail(priocclInvalidUsage, "LayerGate: the communicator is not live");
  if (layers < 1) fail(priocclInvalidArgument, "LayerGate: layers must be >= 1 (", layers, ")");
  if (key.empty()) fail(priocclInvalidArgument, "LayerGate: empty key");
  detail::agreeAcrossRanks(comm, "LayerGate", {{"layers", layers}});
  s_->comm = comm;
  s_->key = key;
  s_->inFlight.resize(static_cast<size_t>(layers));
}

LayerGate::~LayerGate() {
  if (!s_) return;
  for (auto& r : s_->inFlight) {
    if (!r) continue;
    try {
      r->wait();
    } catch (...) {  // the engine no longer touches the buffers; the error was the caller's
    }
  }
}

void LayerGate::submit(int layer, const void* send, void* recv, size_t count,
                       priocclDataType_t datatype, priocclRedOp_t op) {
  std::optional<Request>& r = s_->slot(layer, "submit");
  if (r)
    fail(priocclInvalidUsage, "LayerGate::submit: layer ", layer, " of gate '", s_->key,
         "' was submitted and not waited for since: call wait(", layer, ") first");
  // The layer's name matches the op across ranks; priority = layer: the next forward's order.
  r = s_->comm.allReduceAsync(send, recv, count, datatype, op, layer,
                              s_->key + ".layer" + std::to_string(layer));
}

bool LayerGate::wait(int layer) {
  std::optional<Request>& r = s_->slot(layer, "wait");
  if (!r) return false;
  Request request = *r;
  r.reset();  // whatever the outcome, the op is over: the layer may be submitted again
  request.wait();
  return true;
}

void LayerGate::waitAll() {
  std::exception_ptr first;  // every layer is waited for, even after one failed
  for (int layer = 0; layer < layers(); ++layer) {
    try {
      wait(layer);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

int LayerGate::layers() const {
  return static_cast<int>(s_->inFlight.size());
}

}  // namespace prioccl
