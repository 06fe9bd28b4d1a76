// Internal error helper: throw the typed exceptions of the public C++ API with a formatted message.
#pragma once

#include <sstream>
#include <string>
#include <utility>

#include "prioccl/prioccl.hpp"

namespace prioccl::detail {

template <typename... Args>
std::string concat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

// Throws the exception class that matches `code` (InvalidArgument for priocclInvalidArgument, ...).
[[noreturn]] void raise(priocclResult_t code, const std::string& message);

template <typename... Args>
[[noreturn]] void fail(priocclResult_t code, Args&&... args) {
  raise(code, concat(std::forward<Args>(args)...));
}

}  // namespace prioccl::detail
