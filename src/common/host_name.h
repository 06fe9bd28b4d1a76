// This machine's hostname (gethostname), for log lines and for telling hosts apart
// (topology/host_groups.cpp); "?" when it cannot be read.
#pragma once

#include <unistd.h>

#include <climits>
#include <string>

namespace prioccl {

inline std::string hostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

}  // namespace prioccl
