// Grouped submission (priocclGroupStart/End, as NCCL's): between the outermost start and its end,
// this thread's ops are not handed to their engines; a blocking call returns at once instead of
// waiting. The end hands them over, grouped by communicator (in the order each first appeared)
// and in call order within each, then waits for the blocking ones and reports the first failure.
// Async calls return their requests at once as usual; those ops start at the end too.
//
// Consecutive small all-reduces are fused into one op first (api/fusion.h); the rest are matched
// one by one (each its own agreement or decision), and the progress thread may start on the
// first before the last is handed over.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "prioccl/prioccl.hpp"

namespace prioccl::detail {

struct OpState;

namespace group {

// Whether this thread is inside a group.
bool active();
// Inside a group: `handOver` submits `op` (run at the end, in call order; `engine` groups the
// hand-overs of one engine). Outside: not called.
void defer(const void* engine, std::shared_ptr<OpState> op,
           std::function<void(std::vector<std::shared_ptr<OpState>>&)> handOver);
// A blocking call's request: waited for now, or at the group's end.
void waitOrDefer(const Request& request);

void start();
void end();  // throws the first failure of a deferred hand-over or blocking op

}  // namespace group
}  // namespace prioccl::detail
