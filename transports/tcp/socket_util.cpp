#include "tcp/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"
#include "setup_cancel.h"

namespace prioccl {

std::string errnoText(int e) {
  return std::strerror(e);
}

bool waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || setupCancelled()) return false;
    pollfd p{fd, events, 0};
    // In slices of 100 ms: a cancelled creation (setup_cancel.h) stops waiting within one.
    int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 100)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

bool moveFull(int fd, char* p, size_t bytes, bool out, Clock::time_point deadline) {
  while (bytes > 0) {
    ssize_t r = out ? ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT)
                    : ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      bytes -= static_cast<size_t>(r);
    } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!waitFor(fd, out ? POLLOUT : POLLIN, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

void setNonBlocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

bool interfaceMatches(const std::string& filter, const std::string& name) {
  if (filter.empty()) return true;
  size_t at = 0;
  bool exclude = filter[at] == '^';
  if (exclude) ++at;
  bool exact = at < filter.size() && filter[at] == '=';
  if (exact) ++at;
  bool match = false;
  while (at <= filter.size() && !match) {
    size_t comma = filter.find(',', at);
    std::string item =
        filter.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!item.empty()) match = exact ? name == item : name.compare(0, item.size(), item) == 0;
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return exclude ? !match : match;
}

std::vector<uint32_t> localAddresses(const std::string& filter) {
  std::vector<uint32_t> outer, loopback;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    if (!interfaceMatches(filter, i->ifa_name)) continue;
    uint32_t a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
    (i->ifa_flags & IFF_LOOPBACK ? loopback : outer).push_back(a);
  }
  ::freeifaddrs(list);
  outer.insert(outer.end(), loopback.begin(), loopback.end());
  return outer;
}

std::string addressText(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(addr);
    ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
    return detail::concat("[", text, "]:", ntohs(a.sin6_port));
  }
  const auto& a = reinterpret_cast<const sockaddr_in&>(addr);
  ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
  return detail::concat(text, ":", ntohs(a.sin_port));
}

}  // namespace prioccl
