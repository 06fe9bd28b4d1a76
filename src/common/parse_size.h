// The one byte-size syntax of prioccl: the PRIOCCL_* variables (src/api/config.cpp), the
// benchmarks (perf/) and the stress test all read sizes with this parser, so "64M" means the same
// everywhere. Header-only: the benchmarks and tests include it without linking the library's
// hidden internals.
#pragma once

#include <cerrno>
#include <climits>
#include <cstdlib>

namespace prioccl {
namespace common {

// Parses a non-negative decimal integer with an optional binary multiple K, M, G or T (any case;
// 2^10 .. 2^40), optionally followed by "i" ("KiB"-style) and an optional "B"/"b", alone or after
// the suffix ("4096", "4096B", "4K", "4KiB", "64m", "1G", "1GB"). Leading whitespace and '+' are
// accepted (as strtoull does). Rejects with false, leaving *out alone: an empty string, a '-'
// anywhere, junk before or after, a fraction, and values above ULLONG_MAX after scaling.
inline bool parseSize(const char* text, unsigned long long* out) {
  if (!text) return false;
  for (const char* c = text; *c; ++c)
    if (*c == '-') return false;  // strtoull would wrap "-1" to ULLONG_MAX
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || errno != 0) return false;
  unsigned shift = 0;
  switch (*end) {
    case 'k':
    case 'K':
      shift = 10;
      break;
    case 'm':
    case 'M':
      shift = 20;
      break;
    case 'g':
    case 'G':
      shift = 30;
      break;
    case 't':
    case 'T':
      shift = 40;
      break;
    default:
      break;
  }
  if (shift) {
    ++end;
    if (*end == 'i' || *end == 'I') ++end;
  }
  if (*end == 'b' || *end == 'B') ++end;
  if (*end != '\0' || v > (ULLONG_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

// The same, into a signed value no larger than LLONG_MAX (the benchmarks' byte counts).
inline bool parseSize(const char* text, long long* out) {
  unsigned long long v = 0;
  if (!parseSize(text, &v) || v > static_cast<unsigned long long>(LLONG_MAX)) return false;
  *out = static_cast<long long>(v);
  return true;
}

}  // namespace common
}  // namespace prioccl
