// PRIOCCL_DEBUG=WARN|INFO|TRACE logging, NCCL style: "host:pid:tid PRIOCCL INFO ...", to stderr
// or to PRIOCCL_DEBUG_FILE (%h host, %p pid, %r rank in MPI_COMM_WORLD, %% a literal %).
#pragma once

#include "common/error.h"

namespace prioccl::detail {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

LogLevel logLevel();  // read once from PRIOCCL_DEBUG
void logLine(LogLevel level, const std::string& message);
// The rank that PRIOCCL_DEBUG_FILE's %r stands for, known once MPI is up (the first
// communicator's creation). A file name with %r is opened at the first line logged after this;
// lines before go to stderr. Later calls change nothing: the file stays the one opened.
void setLogRank(int rank);
// PRIOCCL_DEBUG_FILE's pattern with %h, %p and %r (rank < 0: left as is) substituted.
std::string logFileName(const std::string& pattern, const std::string& host, long pid, int rank);

template <typename... Args>
void log(LogLevel level, Args&&... args) {
  if (level <= logLevel()) logLine(level, concat(std::forward<Args>(args)...));
}

}  // namespace prioccl::detail
