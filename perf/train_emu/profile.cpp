#include "profile.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace emu {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream in(line);
  std::string f;
  while (std::getline(in, f, ',')) fields.push_back(trim(f));
  return fields;
}

double parseTime(const std::string& text, const std::string& where) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end || errno || !std::isfinite(v) || v < 0)
    throw std::runtime_error(where + ": '" + text + "' is not a time in ms >= 0");
  return v;
}

}  // namespace

double Profile::fwdMs() const {
  double t = 0;
  for (const Layer& l : layers) t += l.fwdMs;
  return t;
}
double Profile::bwdMs() const {
  double t = 0;
  for (const Layer& l : layers) t += l.bwdMs;
  return t;
}
size_t Profile::params() const {
  size_t n = 0;
  for (const Layer& l : layers) n += l.params;
  return n;
}

Profile loadProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open profile '" + path + "'");
  Profile p;
  size_t slash = path.find_last_of('/');
  p.name = path.substr(slash == std::string::npos ? 0 : slash + 1);
  if (p.name.size() > 4 && p.name.compare(p.name.size() - 4, 4, ".csv") == 0)
    p.name.resize(p.name.size() - 4);
  std::string line;
  bool header = false;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    std::string where = path + ":" + std::to_string(number);
    std::vector<std::string> f = split(t);
    if (!header) {
      if (f != std::vector<std::string>{"layer", "params", "fwd_ms", "bwd_ms"})
        throw std::runtime_error(where + ": expected the header 'layer,params,fwd_ms,bwd_ms'");
      header = true;
      continue;
    }
    if (f.size() != 4)
      throw std::runtime_error(where + ": expected 4 fields, found " + std::to_string(f.size()));
    Layer l;
    l.name = f[0];
    errno = 0;
    char* end = nullptr;
    unsigned long long params = std::strtoull(f[1].c_str(), &end, 10);
    if (f[1].empty() || *end || errno || f[1][0] == '-')
      throw std::runtime_error(where + ": '" + f[1] + "' is not a parameter count");
    l.params = static_cast<size_t>(params);
    l.fwdMs = parseTime(f[2], where);
    l.bwdMs = parseTime(f[3], where);
    p.layers.push_back(l);
  }
  if (!header) throw std::runtime_error(path + ": no header 'layer,params,fwd_ms,bwd_ms'");
  if (p.layers.empty()) throw std::runtime_error(path + ": no layers");
  if (p.params() == 0) throw std::runtime_error(path + ": no layer has parameters");
  return p;
}

Profile scaled(const Profile& p, double paramScale, double computeScale) {
  Profile s = p;
  for (Layer& l : s.layers) {
    if (l.params) l.params = std::max<size_t>(1, std::llround(l.params * paramScale));
    l.fwdMs *= computeScale;
    l.bwdMs *= computeScale;
  }
  return s;
}

}  // namespace emu
