// A model's per-layer profile: parameters and forward/backward compute times, in forward order.
// File format (CSV): a header `layer,params,fwd_ms,bwd_ms`, one row per layer in forward order;
// blank lines and lines starting with '#' are ignored. perf/profiles/ has measured ones.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace emu {

struct Layer {
  std::string name;
  size_t params = 0;  // gradient elements (0: a layer without weights)
  double fwdMs = 0, bwdMs = 0;
};

struct Profile {
  std::string name;  // the file's base name without ".csv"
  std::vector<Layer> layers;
  double fwdMs() const;
  double bwdMs() const;
  size_t params() const;
};

// Throws std::runtime_error naming the file and line on anything malformed.
Profile loadProfile(const std::string& path);

// The emulated model: parameters scaled by `paramScale` (rounded, at least 1 where the profile
// has any) and times by `computeScale`.
Profile scaled(const Profile& p, double paramScale, double computeScale);

}  // namespace emu
