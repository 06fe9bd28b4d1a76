// Which ranks share a host: what the hierarchical all-reduce needs to know about the machine.
// Plain values, the same on every rank (built from one all-gather of each rank's host key), so
// that step machines built from it agree on their peers.
#pragma once

#include <string>
#include <vector>

namespace prioccl {

struct HostLayout {
  // hostOf[r]: rank r's host, numbered in order of each host's lowest rank.
  std::vector<int> hostOf;
  // members[h]: host h's ranks, ascending; localIndex[r] is r's place there.
  std::vector<std::vector<int>> members;
  std::vector<int> localIndex;

  // Ranks with equal keys share a host; keys are compared, never interpreted.
  static HostLayout fromKeys(const std::vector<std::string>& keys);

  int nranks() const { return static_cast<int>(hostOf.size()); }
  int hosts() const { return static_cast<int>(members.size()); }
  int fewestPerHost() const;  // the hierarchical all-reduce's shard count
  int mostPerHost() const;
  // More than one host, and some host with more than one rank: only then do two levels differ
  // from one.
  bool twoLevel() const { return hosts() > 1 && mostPerHost() > 1; }
  // "2 hosts x 2 ranks", "2 hosts (3+2 ranks)", "1 host x 4 ranks".
  std::string describe() const;
};

}  // namespace prioccl
