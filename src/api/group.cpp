#include "api/group.h"

#include <utility>

#include "common/error.h"
#include "core/op.h"

namespace prioccl::detail::group {
namespace {

struct Batch {
  const void* engine;
  std::vector<std::shared_ptr<OpState>> ops;
  std::function<void(std::vector<std::shared_ptr<OpState>>&)> handOver;
};

struct State {
  int depth = 0;
  std::vector<Batch> batches;  // one per engine, in the order each first appeared
  std::vector<Request> blocking;
};

thread_local State t_group;

}  // namespace

bool active() {
  return t_group.depth > 0;
}

void defer(const void* engine, std::shared_ptr<OpState> op,
           std::function<void(std::vector<std::shared_ptr<OpState>>&)> handOver) {
  for (Batch& b : t_group.batches)
    if (b.engine == engine) {
      b.ops.push_back(std::move(op));
      return;
    }
  t_group.batches.push_back({engine, {std::move(op)}, std::move(handOver)});
}

void waitOrDefer(const Request& request) {
  if (active())
    t_group.blocking.push_back(request);
  else
    request.wait();
}

void start() {
  ++t_group.depth;
}

void end() {
  if (t_group.depth == 0) fail(priocclInvalidUsage, "group end without a group start");
  if (--t_group.depth > 0) return;
  State group = std::move(t_group);
  t_group = State{};
  std::string firstError;
  priocclResult_t firstCode = priocclSuccess;
  for (Batch& b : group.batches) {
    try {
      b.handOver(b.ops);
    } catch (const Error& e) {
      // The engine is gone (a destroyed communicator): its ops fail, as their requests show.
      for (auto& op : b.ops)
        if (!op->done.load()) op->finish(e.code(), e.what());
      if (firstCode == priocclSuccess) {
        firstCode = e.code();
        firstError = e.what();
      }
    }
  }
  for (const Request& r : group.blocking) {
    try {
      r.wait();
    } catch (const Error& e) {
      if (firstCode == priocclSuccess) {
        firstCode = e.code();
        firstError = e.what();
      }
    }
  }
  if (firstCode != priocclSuccess) fail(firstCode, "in the group: ", firstError);
}

}  // namespace prioccl::detail::group
