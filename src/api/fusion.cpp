#include "api/fusion.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/wire.h"
#include "reduce/reduce.h"

namespace prioccl::detail {
namespace {

size_t bytesOf(const OpState& op) {
  return op.count * reduce::dtypeSize(op.dtype);
}

// Whether `op` may be fused at all: an all-reduce of host buffers, nothing special about it.
bool fusible(const OpState& op, size_t fusionBytes) {
  return op.kind == OpState::Kind::kAllReduce && op.count > 0 && !op.staging && !op.fence &&
         op.algorithm == priocclAlgoAuto && bytesOf(op) <= fusionBytes &&
         !op.done.load(std::memory_order_acquire);
}

// Whether `next` may join a run that starts with `first`.
bool sameRun(const OpState& first, const OpState& next) {
  return next.dtype == first.dtype && next.op == first.op && next.named == first.named;
}

// A fused op's name (what messages and the timeline show): its members' names.
std::string fusedKey(const std::vector<std::shared_ptr<OpState>>& members) {
  std::string key = concat("fused[", members.size(), "]{");
  for (size_t i = 0; i < members.size(); ++i) key += concat(i ? ", " : "", members[i]->key);
  return key + "}";
}

std::shared_ptr<OpState> makeFused(std::vector<std::shared_ptr<OpState>> members) {
  const OpState& first = *members.front();
  auto fused = std::make_shared<OpState>();
  fused->kind = OpState::Kind::kAllReduce;
  fused->dtype = first.dtype;
  fused->op = first.op;
  fused->named = first.named;
  fused->errorLog = first.errorLog;
  fused->priority = first.priority;
  size_t total = 0;
  // Ranks compare the members' counts and shapes through the fused op's layout: two ranks whose
  // members split the same total differently must fail, not mix their elements.
  std::vector<size_t> parts;
  for (const auto& m : members) {
    fused->priority = std::min(fused->priority, m->priority);
    total += bytesOf(*m);
    parts.push_back(m->count);
    parts.push_back(static_cast<size_t>(m->layout));
  }
  fused->layout = layoutDigest(parts);
  if (fused->named) fused->key = fusedKey(members);
  fused->count = total / reduce::dtypeSize(first.dtype);
  // Owned by the op, so it lives as long as anything (the engine, a late transfer) holds the op.
  fused->ownBuffer.resize(total);
  unsigned char* at = fused->ownBuffer.data();
  for (const auto& m : members) {
    std::memcpy(at, m->send, bytesOf(*m));
    at += bytesOf(*m);
  }
  fused->send = fused->recv = fused->ownBuffer.data();
  // Runs once the fused op is done (its data final on every path, success or not): the members'
  // results out, then the members end with the fused op's outcome.
  OpState* self = fused.get();  // the callback is the op's own: it never outlives it
  fused->callbacks.push_back(
      [self, members = std::move(members)](priocclResult_t code, const std::string& message) {
        const unsigned char* from = self->ownBuffer.data();
        for (const auto& m : members) {
          if (code == priocclSuccess) std::memcpy(m->recv, from, bytesOf(*m));
          from += bytesOf(*m);
          m->finish(code, message);
        }
      });
  return fused;
}

}  // namespace

std::vector<std::shared_ptr<OpState>> fuseAllReduces(std::vector<std::shared_ptr<OpState>> ops,
                                                     size_t fusionBytes) {
  if (fusionBytes == 0 || ops.size() < 2) return ops;
  std::vector<std::shared_ptr<OpState>> out;
  std::vector<std::shared_ptr<OpState>> run;
  size_t runBytes = 0;
  auto close = [&] {
    if (run.size() == 1) out.push_back(std::move(run.front()));
    if (run.size() > 1) out.push_back(makeFused(std::move(run)));
    run.clear();
    runBytes = 0;
  };
  for (auto& op : ops) {
    if (!fusible(*op, fusionBytes)) {
      close();
      out.push_back(std::move(op));
      continue;
    }
    if (!run.empty() && (!sameRun(*run.front(), *op) || runBytes + bytesOf(*op) > fusionBytes))
      close();
    runBytes += bytesOf(*op);
    run.push_back(std::move(op));
  }
  close();
  return out;
}

}  // namespace prioccl::detail
