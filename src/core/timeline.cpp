// Timeline writer: events batch in memory; each flush is one pwrite that replaces the closing
// "\n]" with the new events and a fresh "\n]", so the file is valid JSON between flushes.
#include "core/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "core/log.h"

namespace prioccl::detail {

namespace {
// "dir/trace.json" + ".rank1" -> "dir/trace.rank1.json"; appended when the name has no extension.
std::string insertBeforeExtension(std::string path, const std::string& suffix) {
  size_t dot = path.rfind('.');
  size_t slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + suffix;
  return path.insert(dot, suffix);
}
}  // namespace

std::string Timeline::pathFor(const std::string& path, int rank, int nranks) {
  std::string p = path;
  size_t at = p.find("%r");
  if (at != std::string::npos) return p.replace(at, 2, std::to_string(rank));
  if (nranks <= 1 || rank == 0) return p;
  return insertBeforeExtension(p, ".rank" + std::to_string(rank));
}

Timeline::Timeline(const std::string& path, int rank, int nranks)
    : rank_(rank), origin_(Clock::now()) {
  if (path.empty()) return;
  path_ = pathFor(path, rank, nranks);
  // A second communicator in the same process must not truncate the first one's file.
  static std::atomic<int> communicators{0};
  if (int n = communicators.fetch_add(1); n > 0)
    path_ = insertBeforeExtension(path_, ".comm" + std::to_string(n));
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    log(LogLevel::kWarn, "cannot write timeline ", path_, ": ", std::strerror(errno));
    return;
  }
  std::string head = concat("[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":", rank_,
                            ",\"args\":{\"name\":\"rank ", rank_, "\"}}\n]");
  if (::pwrite(fd_, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  end_ = static_cast<long long>(head.size()) - 2;
}

Timeline::~Timeline() {
  if (fd_ < 0) return;
  flush();
  ::close(fd_);
}

void Timeline::span(const char* phase, uint64_t op, Clock::time_point start, Clock::time_point end,
                    const std::string& args) {
  if (fd_ < 0) return;
  using std::chrono::duration;
  double ts = duration<double, std::micro>(start - origin_).count();
  double dur = duration<double, std::micro>(end - start).count();
  pending_ +=
      concat(",\n{\"name\":\"", phase, "\",\"ph\":\"X\",\"pid\":", rank_, ",\"tid\":", op,
             ",\"ts\":", static_cast<long long>(ts * 1000) / 1000.0,
             ",\"dur\":", static_cast<long long>(dur * 1000) / 1000.0, ",\"args\":{", args, "}}");
  if (pending_.size() > 64 * 1024) flush();
}

void Timeline::flush() {
  if (fd_ < 0 || pending_.empty()) return;
  pending_ += "\n]";
  ssize_t n = ::pwrite(fd_, pending_.data(), pending_.size(), end_);
  if (n == static_cast<ssize_t>(pending_.size())) end_ += static_cast<long long>(n) - 2;
  pending_.clear();
}

}  // namespace prioccl::detail
