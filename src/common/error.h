// Internal error helper: throw the typed exceptions of the public C++ API with a formatted message.
#pragma once

#include <cstring>
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

// "a, b, c": the items of a range, for messages that list ranks.
template <typename Range>
std::string commaList(const Range& items) {
  std::ostringstream os;
  const char* sep = "";
  for (const auto& item : items) {
    os << sep << item;
    sep = ", ";
  }
  return os.str();
}

// The bits of an enum argument as an int, without loading it as the enum: callers from C or
// ctypes may pass any int, and a C++ load of an out-of-range enum value is undefined.
template <typename E>
int enumBits(const E& e) {
  static_assert(sizeof(E) == sizeof(int), "enum must be int-sized");
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Throws the exception class that matches `code` (InvalidArgument for priocclInvalidArgument, ...).
[[noreturn]] void raise(priocclResult_t code, const std::string& message);

template <typename... Args>
[[noreturn]] void fail(priocclResult_t code, Args&&... args) {
  raise(code, concat(std::forward<Args>(args)...));
}

}  // namespace prioccl::detail
