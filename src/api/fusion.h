// Fusion of a group's small all-reduces (PRIOCCL_FUSION_BYTES; Horovod's fusion buffer, made
// deterministic). At a group's end (group.h), each run of consecutive all-reduces that may share
// one op (same datatype and reduction, all named or all unnamed, host buffers, the automatic
// algorithm, each at most the threshold) becomes one op over a buffer of its own, cut where the
// next member would pass the threshold. The fused op takes the most urgent member's priority;
// its members finish when it does, with its result copied out, or with its error.
//
// Which ops fuse depends only on the group's ops in call order, never on timing, so every rank
// that submits the same group builds the same fused ops and ends with the same bits. A rank whose
// group differs builds a different op, which fails as any mismatched op does (its message names
// the members), so no existing mismatch goes unreported.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/op.h"

namespace prioccl::detail {

// The group's ops as they go to the engine: members of a run replaced, at the place of the
// run's first, by their fused op (the members' input already copied into it). Ops that fuse with
// none are returned as they are. `fusionBytes` 0: nothing fuses.
std::vector<std::shared_ptr<OpState>> fuseAllReduces(std::vector<std::shared_ptr<OpState>> ops,
                                                     size_t fusionBytes);

}  // namespace prioccl::detail
