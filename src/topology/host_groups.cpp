#include "topology/host_groups.h"

#include <memory>

#include "bootstrap.h"
#include "common/host_name.h"

namespace prioccl {
namespace {

// The key one rank contributes: "id:<hostId>" with an override, else "node<lowest rank sharing
// memory>:<hostname>".
std::string hostKey(const std::string& hostId, int sharedGroupLeader, const std::string& hostname) {
  if (!hostId.empty()) return "id:" + hostId;
  return "node" + std::to_string(sharedGroupLeader) + ":" + hostname;
}

}  // namespace

HostGroups detectHostGroups(Bootstrap& bootstrap, const std::string& hostId) {
  // Every rank takes part in both collectives, whatever it was told, so that they match.
  std::vector<char> shares = bootstrap.sameHost();
  int leader = bootstrap.rank();
  for (int r = 0; r < static_cast<int>(shares.size()); ++r)
    if (shares[r]) {
      leader = r;
      break;
    }
  const std::string hostname = hostName();
  // Each rank sends its key and its name, NUL-separated.
  std::string mine = hostKey(hostId, leader, hostname);
  mine.push_back('\0');
  mine += hostId.empty() ? hostname : hostId;
  std::vector<std::vector<char>> all = bootstrap.allGather(mine.data(), mine.size());
  std::vector<std::string> keys, names;
  for (const std::vector<char>& v : all) {
    std::string s(v.begin(), v.end());
    size_t nul = s.find('\0');
    keys.push_back(s.substr(0, nul));
    names.push_back(nul == std::string::npos ? s : s.substr(nul + 1));
  }
  HostGroups g;
  g.layout = HostLayout::fromKeys(keys);
  for (const std::vector<int>& m : g.layout.members) g.names.push_back(names[m.front()]);
  return g;
}

HostLevels measureHostLevels(Bootstrap& bootstrap, const HostLayout& layout) {
  HostLevels levels;
  if (!layout.twoLevel()) return levels;  // the same answer on every rank: the layout is shared
  const int r = bootstrap.rank(), local = layout.localIndex[r];
  std::unique_ptr<Bootstrap> intra = bootstrap.split(layout.hostOf[r], r);
  std::unique_ptr<Bootstrap> across =
      bootstrap.split(local < layout.fewestPerHost() ? local : -1, r);
  LinkEstimate in = measureRingLink(*intra);
  LinkEstimate out = across ? measureRingLink(*across) : LinkEstimate{};
  // Maxima of latency and of minus bandwidth: the slowest group. A group of one rank measured
  // nothing and must not win.
  constexpr double kNothing = -1e300;
  std::vector<double> v = {in.latencySeconds, in.nranks > 1 ? -in.bytesPerSecond : kNothing,
                           out.latencySeconds, out.nranks > 1 ? -out.bytesPerSecond : kNothing};
  bootstrap.allReduceMax(v);
  levels.hosts = layout.hosts();
  levels.shards = layout.fewestPerHost();
  levels.most = layout.mostPerHost();
  levels.intraLatencySeconds = v[0];
  levels.intraBytesPerSecond = v[1] == kNothing ? 0 : -v[1];
  levels.interLatencySeconds = v[2];
  levels.interBytesPerSecond = v[3] == kNothing ? 0 : -v[3];
  return levels;
}

}  // namespace prioccl
