// PRIOCCL_DEBUG=WARN|INFO|TRACE logging to stderr, NCCL style: "host:pid:tid PRIOCCL INFO ...".
#pragma once

#include "core/error.h"

namespace prioccl::detail {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

LogLevel logLevel();  // read once from PRIOCCL_DEBUG
void logLine(LogLevel level, const std::string& message);

template <typename... Args>
void log(LogLevel level, Args&&... args) {
  if (level <= logLevel()) logLine(level, concat(std::forward<Args>(args)...));
}

}  // namespace prioccl::detail
