// Timeline writer: events batch in memory; each flush is one pwrite that replaces the closing
// "\n]" with the new events and a fresh "\n]", so the file is valid JSON between flushes.
// Events are serialised by nlohmann::json, so any op key (quotes, backslashes, control
// characters) is escaped; bytes that are not UTF-8 become U+FFFD rather than failing the dump.
#include "common/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace prioccl::detail {

namespace {
using nlohmann::json;

// "dir/trace.json" + ".rank1" -> "dir/trace.rank1.json"; appended when the name has no extension.
std::string insertBeforeExtension(std::string path, const std::string& suffix) {
  size_t dot = path.rfind('.');
  size_t slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + suffix;
  return path.insert(dot, suffix);
}

std::string dump(const json& j) {
  // Compact, UTF-8 kept as is (not \u-escaped), invalid UTF-8 replaced instead of throwing.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Microseconds, as Chrome's "ts"/"dur" want them, from whole nanoseconds.
double micros(int64_t ns) {
  return static_cast<double>(ns) / 1000.0;
}
}  // namespace

std::string Timeline::pathFor(const std::string& path, int rank, int nranks) {
  std::string p = path;
  size_t at = p.find("%r");
  if (at != std::string::npos) return p.replace(at, 2, std::to_string(rank));
  if (nranks <= 1 || rank == 0) return p;
  return insertBeforeExtension(p, ".rank" + std::to_string(rank));
}

int Timeline::nextCommunicator() {
  static std::atomic<int> communicators{0};
  return communicators.fetch_add(1);
}

Timeline::Timeline(const std::string& path, int rank, int nranks, const TimelineClock& clock,
                   int communicator)
    : rank_(rank) {
  if (path.empty()) return;
  int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  // Without a measured offset, the rank's own creation time is its origin, as before.
  shiftNs_ = clock.measured ? clock.skewNs + clock.offsetNs - clock.originNs : -now;
  path_ = pathFor(path, rank, nranks);
  // A second communicator in the same process must not truncate the first one's file.
  if (communicator > 0)
    path_ = insertBeforeExtension(path_, ".comm" + std::to_string(communicator));
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    log(LogLevel::kWarn, "cannot write timeline PRIOCCL_TIMELINE=", path_, ": ",
        std::strerror(errno));
    return;
  }
  json name = {{"name", "process_name"},
               {"ph", "M"},
               {"pid", rank_},
               {"args", {{"name", concat("rank ", rank_)}}}};
  // How this file's times relate to rank 0's: what scripts/prioccl-timeline merge reports.
  json sync = {{"name", "clock_sync"},
               {"ph", "M"},
               {"pid", rank_},
               {"args",
                {{"rank", rank_},
                 {"nranks", nranks},
                 {"aligned_to_rank0", clock.measured},
                 {"offset_us", micros(clock.offsetNs)},
                 {"rtt_us", micros(clock.rttNs)},
                 {"rounds", clock.rounds},
                 {"injected_skew_us", micros(clock.skewNs)},
                 {"clock", "steady_clock (CLOCK_MONOTONIC)"}}}};
  std::string head = "[\n" + dump(name) + ",\n" + dump(sync) + "\n]";
  if (::pwrite(fd_, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
    log(LogLevel::kWarn, "cannot write timeline PRIOCCL_TIMELINE=", path_, ": ",
        std::strerror(errno));
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

void Timeline::append(const std::string& event) {
  pending_ += ",\n";
  pending_ += event;
  if (pending_.size() > 64 * 1024) flush();
}

void Timeline::span(const char* phase, uint64_t op, Clock::time_point start, Clock::time_point end,
                    std::initializer_list<TimelineArg> args) {
  if (fd_ < 0) return;
  using std::chrono::nanoseconds;
  int64_t startNs = std::chrono::duration_cast<nanoseconds>(start.time_since_epoch()).count();
  int64_t durNs = std::chrono::duration_cast<nanoseconds>(end - start).count();
  json a = json::object();
  for (const TimelineArg& arg : args) {
    if (arg.text)
      a[arg.name] = *arg.text;
    else
      a[arg.name] = arg.number;
  }
  append(dump({{"name", phase},
               {"ph", "X"},
               {"pid", rank_},
               {"tid", op},
               {"ts", micros(startNs + shiftNs_)},
               {"dur", micros(durNs)},
               {"args", std::move(a)}}));
}

void Timeline::nameTrack(uint64_t op, const std::string& name) {
  if (fd_ < 0) return;
  append(dump({{"name", "thread_name"},
               {"ph", "M"},
               {"pid", rank_},
               {"tid", op},
               {"args", {{"name", name}}}}));
}

void Timeline::flush() {
  if (fd_ < 0 || pending_.empty()) return;
  pending_ += "\n]";
  ssize_t n = ::pwrite(fd_, pending_.data(), pending_.size(), end_);
  if (n == static_cast<ssize_t>(pending_.size())) end_ += static_cast<long long>(n) - 2;
  pending_.clear();
}

}  // namespace prioccl::detail
