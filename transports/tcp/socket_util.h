// What the TCP transport and the TCP bootstrap share: blocking-with-deadline moves over
// non-blocking sockets, interface filters (NCCL's NCCL_SOCKET_IFNAME syntax) and this host's
// addresses.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace prioccl {

using Clock = std::chrono::steady_clock;

std::string errnoText(int e);

// Waits until fd is ready for `events` or the deadline passes; false on timeout, or once this
// thread's creation is cancelled (setup_cancel.h).
bool waitFor(int fd, short events, Clock::time_point deadline);

// Moves exactly `bytes` through a socket (send when `out`, else receive), waiting for it up to
// the deadline; false on a timeout, an error or a closed connection. Never raises SIGPIPE.
bool moveFull(int fd, char* p, size_t bytes, bool out, Clock::time_point deadline);

void setNonBlocking(int fd);

// NCCL's NCCL_SOCKET_IFNAME syntax: comma-separated name prefixes; a leading '^' excludes the
// listed ones, a leading '=' (after any '^') makes the names exact. Empty: every interface.
bool interfaceMatches(const std::string& filter, const std::string& name);

// This host's IPv4 addresses that the filter lets through (network byte order): other
// interfaces first, loopback last.
std::vector<uint32_t> localAddresses(const std::string& filter);

// "1.2.3.4:5" or "[::1]:5".
std::string addressText(const sockaddr_storage& addr);

}  // namespace prioccl
