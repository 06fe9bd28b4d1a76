#include "algo/host_layout.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace prioccl {

HostLayout HostLayout::fromKeys(const std::vector<std::string>& keys) {
  HostLayout l;
  std::map<std::string, int> hostByKey;
  for (const std::string& key : keys) {
    auto [it, added] = hostByKey.emplace(key, static_cast<int>(l.members.size()));
    if (added) l.members.emplace_back();
    int r = static_cast<int>(l.hostOf.size());
    l.hostOf.push_back(it->second);
    l.localIndex.push_back(static_cast<int>(l.members[it->second].size()));
    l.members[it->second].push_back(r);
  }
  return l;
}

int HostLayout::fewestPerHost() const {
  size_t n = members.empty() ? 0 : members[0].size();
  for (const auto& m : members) n = std::min(n, m.size());
  return static_cast<int>(n);
}

int HostLayout::mostPerHost() const {
  size_t n = 0;
  for (const auto& m : members) n = std::max(n, m.size());
  return static_cast<int>(n);
}

std::string HostLayout::describe() const {
  std::ostringstream out;
  out << hosts() << (hosts() == 1 ? " host" : " hosts");
  if (fewestPerHost() == mostPerHost()) {
    out << " x " << mostPerHost() << (mostPerHost() == 1 ? " rank" : " ranks");
  } else {
    out << " (";
    for (size_t h = 0; h < members.size(); ++h) out << (h ? "+" : "") << members[h].size();
    out << " ranks)";
  }
  return out.str();
}

}  // namespace prioccl
