// Logging and the error helpers shared by the whole library.
#include "common/log.h"

#include "common/host_name.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

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

std::string logFileName(const std::string& pattern, const std::string& host, long pid, int rank) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (pattern[i] != '%' || !std::strchr("hpr%", next) || (next == 'r' && rank < 0)) {
      out += pattern[i];
      continue;
    }
    ++i;
    if (next == 'h')
      out += host;
    else if (next == 'p')
      out += std::to_string(pid);
    else if (next == 'r')
      out += std::to_string(rank);
    else
      out += '%';
  }
  return out;
}

namespace {

// Where log lines go: stderr, or PRIOCCL_DEBUG_FILE once it can be named. Opened lazily, at
// the first line logged, so that a run without logging never creates the file.
struct LogSink {
  std::mutex mutex;
  std::string pattern;  // PRIOCCL_DEBUG_FILE, "" for stderr
  int rank = -1;
  FILE* file = nullptr;  // nullptr: stderr
  bool settled = false;  // the file is open, or failed (once reported) and stderr it is

  LogSink() {
    const char* v = std::getenv("PRIOCCL_DEBUG_FILE");
    if (v && *v) pattern = v;
    settled = pattern.empty();
  }
  // Under `mutex`. The stream for the next line.
  FILE* stream(const char* host) {
    if (settled) return file ? file : stderr;
    if (rank < 0 && pattern.find("%r") != std::string::npos) return stderr;  // not yet
    settled = true;
    std::string name = logFileName(pattern, host, static_cast<long>(getpid()), rank);
    file = std::fopen(name.c_str(), "we");  // close-on-exec: children keep their own log
    if (!file) {
      std::fprintf(stderr,
                   "%s:%d PRIOCCL WARN cannot open PRIOCCL_DEBUG_FILE=%s (%s): %s; logging to "
                   "stderr\n",
                   host, static_cast<int>(getpid()), pattern.c_str(), name.c_str(),
                   std::strerror(errno));
      return stderr;
    }
    setvbuf(file, nullptr, _IOLBF, 0);  // whole lines reach the file, also before a crash
    return file;
  }
};

LogSink& sink() {
  static LogSink* s = new LogSink;  // never destroyed: threads may log during exit
  return *s;
}

}  // namespace

void setLogRank(int rank) {
  LogSink& s = sink();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.rank < 0) s.rank = rank;
}

void logLine(LogLevel level, const std::string& message) {
  static const char* names[] = {"", "WARN", "INFO", "TRACE"};
  const std::string hostString = hostName();
  const char* host = hostString.c_str();
  LogSink& s = sink();
  // One fprintf per line, under the lock, so lines from several threads do not interleave.
  std::lock_guard<std::mutex> lock(s.mutex);
  std::fprintf(s.stream(host), "%s:%d:%ld PRIOCCL %s %s\n", host, static_cast<int>(getpid()),
               static_cast<long>(syscall(SYS_gettid)), names[static_cast<int>(level)],
               message.c_str());
}

void raise(priocclResult_t code, const std::string& message) {
  switch (code) {
    case priocclUnhandledCudaError:
      throw CudaError(message);
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
