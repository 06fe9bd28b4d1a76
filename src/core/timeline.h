// PRIOCCL_TIMELINE: a Chrome-trace JSON file (chrome://tracing, Perfetto) per rank with one track
// per op, so preemption can be seen. The file is valid JSON after every flush, so a process
// killed mid-run still leaves a readable trace.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace prioccl::detail {

class Timeline {
 public:
  // `path` may contain %r, replaced by the rank; without it, ranks other than 0 write
  // path with ".rank<r>" inserted before its extension, and the n-th further communicator of a
  // process inserts ".comm<n>". An empty path disables the timeline.
  Timeline(const std::string& path, int rank, int nranks);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  bool enabled() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  static std::string pathFor(const std::string& path, int rank, int nranks);

  using Clock = std::chrono::steady_clock;
  // A complete event on track `op` from `start` to `end`; `args` is a JSON object body.
  void span(const char* phase, uint64_t op, Clock::time_point start, Clock::time_point end,
            const std::string& args);
  void flush();

 private:
  int fd_ = -1;
  int rank_;
  std::string path_;
  std::string pending_;
  long long end_ = 0;  // file offset of the closing "]"
  Clock::time_point origin_;
};

}  // namespace prioccl::detail
