// Logging and the error helpers shared by the whole library.
#include "core/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace prioccl::detail {

LogLevel logLevel() {
  static const LogLevel level = [] {
    const char* v = std::getenv("PRIOCCL_DEBUG");
    if (!v || !*v) return LogLevel::kNone;
    if (!strcasecmp(v, "WARN")) return LogLevel::kWarn;
    if (!strcasecmp(v, "INFO")) return LogLevel::kInfo;
    if (!strcasecmp(v, "TRACE")) return LogLevel::kTrace;
    std::fprintf(stderr, "PRIOCCL WARN PRIOCCL_DEBUG=%s is not one of WARN, INFO, TRACE\n", v);
    return LogLevel::kWarn;
  }();
  return level;
}

void logLine(LogLevel level, const std::string& message) {
  static const char* names[] = {"", "WARN", "INFO", "TRACE"};
  char host[64] = "?";
  gethostname(host, sizeof host - 1);
  // One fprintf per line so lines from several threads do not interleave.
  std::fprintf(stderr, "%s:%d:%ld PRIOCCL %s %s\n", host, static_cast<int>(getpid()),
               static_cast<long>(syscall(SYS_gettid)), names[static_cast<int>(level)],
               message.c_str());
}

void raise(priocclResult_t code, const std::string& message) {
  switch (code) {
    case priocclSystemError:
      throw SystemError(message);
    case priocclInvalidArgument:
      throw InvalidArgument(message);
    case priocclInvalidUsage:
      throw InvalidUsage(message);
    case priocclRemoteError:
      throw RemoteError(message);
    case priocclTimeout:
      throw Timeout(message);
    default:
      throw InternalError(message);
  }
}

}  // namespace prioccl::detail
