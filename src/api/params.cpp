// The loops over the parameter table (param_table.cpp): reading the environment and the C
// config struct, validating, describing, and the values every rank must agree on.
#include "api/params.h"

#include <strings.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "algo/registry.h"
#include "algo/select.h"
#include "common/error.h"
#include "common/parse_size.h"
#include "common/same_everywhere.h"

namespace prioccl::detail {

namespace {

// "1e+09" -> "1e9": the bounds of seconds as the messages have always written them.
std::string numberText(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  std::string s = buf;
  size_t e = s.find("e+");
  if (e != std::string::npos) {
    size_t digits = e + 2;
    while (digits + 1 < s.size() && s[digits] == '0') ++digits;
    s = s.substr(0, e + 1) + s.substr(digits);
  }
  return s;
}

// 1073741824 -> "1G": sizes in docs and prioccl_info, in the syntax the variables accept.
std::string sizeText(unsigned long long v) {
  const char* suffix = "KMGT";
  int i = -1;
  while (i < 3 && v >= 1024 && v % 1024 == 0) {
    v /= 1024;
    ++i;
  }
  return i < 0 ? std::to_string(v) : std::to_string(v) + suffix[i];
}

// The choices a message or doc lists: "'priority' or 'fifo'", "'a', 'b' or 'c'".
std::string choiceList(const Param& p, const char* quote, const char* comma, const char* orWord) {
  std::vector<const char*> names;
  for (const ParamChoice& ch : p.choices)
    if (!ch.alias) names.push_back(ch.text);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) out += i + 1 == names.size() ? orWord : comma;
    out += concat(quote, names[i], quote);
  }
  return out;
}

const ParamChoice* findChoice(const Param& p, const char* text) {
  for (const ParamChoice& ch : p.choices)
    if (!strcasecmp(text, ch.text)) return &ch;
  return nullptr;
}

const char* choiceName(const Param& p, int value) {
  for (const ParamChoice& ch : p.choices)
    if (!ch.alias && ch.value == value) return ch.text;
  return nullptr;
}

bool parseBool(const char* name, const char* text) {
  if (!std::strcmp(text, "1") || !strcasecmp(text, "true") || !strcasecmp(text, "yes")) return true;
  if (!std::strcmp(text, "0") || !strcasecmp(text, "false") || !strcasecmp(text, "no"))
    return false;
  fail(priocclInvalidArgument, name, "='", text, "' is not a boolean (1/0, true/false, yes/no)");
}

// Non-negative seconds, decimals allowed ("300", "2.5"); 0 turns the feature off.
double parseSeconds(const Param& p, const char* v) {
  errno = 0;
  char* end = nullptr;
  double s = std::strtod(v, &end);
  if (end == v || *end || errno != 0 || !(s >= p.lo) || s > p.hi)
    fail(priocclInvalidArgument, p.env, "='", v, "' is not a number of seconds between ",
         numberText(p.lo), " (off) and ", numberText(p.hi));
  return s;
}

// The bits of an enum member as an int: a C++ Config may hold any value in it.
template <typename E>
int bitsOf(const E& e) {
  return enumBits(e);
}

// 32-bit FNV-1a, exact in a double: equal texts give equal maxima and minima across ranks. The
// empty text hashes to 0 so that "no rules" reads as such.
double textHash(const std::string& text) {
  if (text.empty()) return 0;
  uint32_t h = 2166136261u;
  for (unsigned char ch : text) h = (h ^ ch) * 16777619u;
  return static_cast<double>(h);
}

// A row's value in `c` as text; `forLog`: as describe() writes it ("off" for an unset string).
std::string valueText(const Param& p, const Config& c, bool forLog) {
  return std::visit(
      [&](auto m) -> std::string {
        using M = decltype(m);
        if constexpr (std::is_same_v<M, std::monostate>) {
          const char* v = std::getenv(p.env);
          return v && *v ? std::string(v) : std::string(p.defaultText);
        } else {
          using T = std::remove_cv_t<std::remove_reference_t<decltype(c.*m)>>;
          const T& v = c.*m;
          if constexpr (std::is_same_v<T, size_t>) {
            return p.kind == ParamKind::kSizeOrAuto && v == 0 ? "auto" : std::to_string(v);
          } else if constexpr (std::is_same_v<T, bool>) {
            return v ? "1" : "0";
          } else if constexpr (std::is_same_v<T, double>) {
            return concat(v);
          } else if constexpr (std::is_same_v<T, std::string>) {
            return v.empty() ? (forLog ? "off" : "unset") : v;
          } else {
            static_assert(std::is_enum_v<T>);
            if (p.kind == ParamKind::kAlgorithm && !c.algorithmRules.empty())
              return c.algorithmRules;
            const char* name = choiceName(p, bitsOf(v));
            return name ? std::string(name) : concat("invalid(", bitsOf(v), ")");
          }
        }
      },
      p.member);
}

// What ranks compare: one double per mustAgree row, exact for every value it can hold.
double agreementValue(const Param& p, const Config& c) {
  return std::visit(
      [&](auto m) -> double {
        using M = decltype(m);
        if constexpr (std::is_same_v<M, std::monostate>) {
          return 0;  // process-wide knobs are not compared
        } else {
          using T = std::remove_cv_t<std::remove_reference_t<decltype(c.*m)>>;
          const T& v = c.*m;
          if constexpr (std::is_same_v<T, std::string>) {
            return textHash(v);
          } else if constexpr (std::is_enum_v<T>) {
            // The size rules ride above the algorithm's 3 bits: < 2^35, exact.
            double rules = p.kind == ParamKind::kAlgorithm ? textHash(c.algorithmRules) : 0;
            return rules * 8 + bitsOf(v);
          } else {
            return static_cast<double>(v);
          }
        }
      },
      p.member);
}

// A compared value back as text, for the error message.
std::string agreedText(const Param& p, double v) {
  if (p.kind == ParamKind::kAlgorithm && v >= 8) return "size rules";
  if (p.kind == ParamKind::kChoice || p.kind == ParamKind::kAlgorithm) {
    const char* name = choiceName(p, static_cast<int>(v));
    return name ? std::string(name) : concat(v);
  }
  if (p.kind == ParamKind::kString) return v == 0 ? "unset" : "a path";
  return concat(v, p.kind == ParamKind::kSeconds ? " s" : "");
}

}  // namespace

unsigned long long parseSizeNamed(const char* name, const char* text, unsigned long long lo,
                                  unsigned long long hi) {
  unsigned long long v = 0;
  if (!common::parseSize(text, &v) || v < lo || v > hi)
    fail(priocclInvalidArgument, name, "='", text, "' is not a size between ", lo, " and ", hi,
         " (a number with an optional K, M or G suffix)");
  return v;
}

void readEnv(Config& c) {
  for (const Param& p : paramTable()) {
    std::visit(
        [&](auto m) {
          using M = decltype(m);
          if constexpr (!std::is_same_v<M, std::monostate>) {
            using T = std::remove_reference_t<decltype(c.*m)>;
            const char* v = std::getenv(p.env);
            if constexpr (std::is_same_v<T, std::string>) {
              if (v) c.*m = v;  // set but empty: the empty text
              return;
            }
            if (!v || !*v) return;  // unset or empty: the default
            if constexpr (std::is_same_v<T, size_t>) {
              // As a size, but "auto" (or "0") selects the measured default.
              if (p.kind == ParamKind::kSizeOrAuto && (!strcasecmp(v, "auto") || !strcmp(v, "0")))
                c.*m = 0;
              else
                c.*m = static_cast<size_t>(parseSizeNamed(p.env, v,
                                                          static_cast<unsigned long long>(p.lo),
                                                          static_cast<unsigned long long>(p.hi)));
            } else if constexpr (std::is_same_v<T, bool>) {
              c.*m = parseBool(p.env, v);
            } else if constexpr (std::is_same_v<T, double>) {
              c.*m = parseSeconds(p, v);
            } else if constexpr (std::is_enum_v<T>) {
              if (p.kind == ParamKind::kAlgorithm && std::strpbrk(v, "<,")) {
                parseAlgorithmRules(p.env, v);  // validates now: a bad value fails here, named
                c.algorithmRules = v;
                return;
              }
              const ParamChoice* ch = findChoice(p, v);
              if (!ch)
                fail(priocclInvalidArgument, p.env, "='", v, "' is not ",
                     choiceList(p, "'", ", ", " or "));
              c.*m = static_cast<T>(ch->value);
            }
          }
        },
        p.member);
  }
}

void mergeCConfig(const priocclConfig_t& config, Config& c) {
  // Structs from before a later field existed end where it starts; nothing else is a layout.
  bool known = config.size == sizeof(priocclConfig_t);
  for (const Param& p : paramTable()) known = known || (p.c.newLayout && config.size == p.c.offset);
  if (!known)
    fail(priocclInvalidArgument, "config->size is ", config.size, ", expected ",
         sizeof(priocclConfig_t), ": initialise it with PRIOCCL_CONFIG_INITIALIZER");
  const char* base = reinterpret_cast<const char*>(&config);
  for (const Param& p : paramTable()) {
    if (p.c.type == CType::kNone) continue;
    size_t bytes = p.c.type == CType::kInt ? sizeof(int) : 8;
    if (p.c.offset + bytes > config.size) continue;  // an older layout without it
    long long ll = -1;
    int i = -1;
    double d = -1;
    if (p.c.type == CType::kLongLong) std::memcpy(&ll, base + p.c.offset, sizeof ll);
    if (p.c.type == CType::kInt) std::memcpy(&i, base + p.c.offset, sizeof i);
    if (p.c.type == CType::kDouble) std::memcpy(&d, base + p.c.offset, sizeof d);
    if (ll == -1 && i == -1 && d == -1) continue;  // left at PRIOCCL_CONFIG_INITIALIZER's -1
    std::visit(
        [&](auto m) {
          using M = decltype(m);
          if constexpr (!std::is_same_v<M, std::monostate>) {
            using T = std::remove_reference_t<decltype(c.*m)>;
            if constexpr (std::is_same_v<T, size_t>) {
              bool zeroIsAuto = p.kind == ParamKind::kSizeOrAuto;
              // Upper bounds: validateConfig, as for a C++ Config.
              if (ll < 0 || (ll == 0 && !zeroIsAuto))
                fail(priocclInvalidArgument, "config->", p.field, " = ", ll,
                     zeroIsAuto ? " must be >= 0 (0 = auto)" : " must be > 0");
              c.*m = static_cast<size_t>(ll);
            } else if constexpr (std::is_same_v<T, bool>) {
              c.*m = i != 0;  // a C boolean: any non-zero value
            } else if constexpr (std::is_same_v<T, double>) {
              if (!(d >= p.lo) || d > p.hi)
                fail(priocclInvalidArgument, "config->", p.field, " = ", d, " must be between ",
                     numberText(p.lo), " (off) and ", numberText(p.hi), " seconds");
              c.*m = d;
            } else if constexpr (std::is_enum_v<T>) {
              if (!choiceName(p, i))
                fail(priocclInvalidArgument, "config->", p.field, " = ", i, " is not a ",
                     p.cTypeName);
              c.*m = static_cast<T>(i);
            }
          }
        },
        p.member);
  }
}

void validateConfig(const Config& c) {
  for (const Param& p : paramTable()) {
    std::visit(
        [&](auto m) {
          using M = decltype(m);
          if constexpr (!std::is_same_v<M, std::monostate>) {
            using T = std::remove_cv_t<std::remove_reference_t<decltype(c.*m)>>;
            const T& v = c.*m;
            if constexpr (std::is_same_v<T, size_t>) {
              bool autoOk = p.kind == ParamKind::kSizeOrAuto;
              if ((v != 0 || !autoOk) &&
                  (static_cast<double>(v) < p.lo || static_cast<double>(v) > p.hi))
                fail(priocclInvalidArgument, p.field, "=", v, " is outside [",
                     static_cast<unsigned long long>(p.lo), ", ",
                     static_cast<unsigned long long>(p.hi), "]", autoOk ? " (0 = auto)" : "");
            } else if constexpr (std::is_same_v<T, double>) {
              if (!(v >= p.lo) || v > p.hi)
                fail(priocclInvalidArgument, p.field, "=", v, " is outside [", numberText(p.lo),
                     " (off), ", numberText(p.hi), "]");
            } else if constexpr (std::is_enum_v<T>) {
              if (!choiceName(p, bitsOf(v)))
                fail(priocclInvalidArgument, p.field, "=", bitsOf(v), " is not a ", p.cTypeName);
            }
          }
        },
        p.member);
  }
}

std::string describeParams(const Config& c) {
  std::string out;
  for (const Param& p : paramTable()) {
    if (std::holds_alternative<std::monostate>(p.member)) continue;
    out += concat(out.empty() ? "" : " ", p.field, "=", valueText(p, c, true));
  }
  return out;
}

std::vector<double> agreementValues(const Config& c) {
  std::vector<double> values;
  for (const Param& p : paramTable())
    if (p.mustAgree) values.push_back(agreementValue(p, c));
  return withFlips(values);
}

std::string disagreement(const std::vector<double>& maxima) {
  size_t rows = 0;
  for (const Param& p : paramTable()) rows += p.mustAgree;
  double lo = 0, hi = 0;
  long k = firstDisagreement(maxima, rows, &lo, &hi);
  if (k < 0) return "";
  for (const Param& p : paramTable()) {
    if (!p.mustAgree || k-- > 0) continue;
    std::string fields = concat("config.", p.field);
    if (p.kind == ParamKind::kAlgorithm) fields += " / config.algorithmRules";
    return concat("ranks disagree on ", *p.agreeLabel ? p.agreeLabel : p.field, " (", p.env, " / ",
                  fields, ": ", agreedText(p, lo), " to ", agreedText(p, hi),
                  "): every rank must use the same setting");
  }
  return "";
}

}  // namespace prioccl::detail

namespace prioccl {

using detail::Param;
using detail::ParamKind;

std::vector<ParamInfo> params() {
  static const char* const kKinds[] = {"size",   "size-or-auto", "count",  "bool",
                                       "choice", "seconds",      "string", "algorithm-rules"};
  static const char* const kScopes[] = {"communicator", "process", "python"};
  const Config defaults;
  std::vector<ParamInfo> out;
  for (const Param& p : detail::paramTable()) {
    ParamInfo info{};
    info.name = p.env;
    info.field = p.field;
    info.kind = kKinds[static_cast<int>(p.kind)];
    switch (p.kind) {
      case ParamKind::kSize:
      case ParamKind::kSizeOrAuto:
        info.range = detail::concat(p.kind == ParamKind::kSizeOrAuto ? "auto, or " : "",
                                    detail::sizeText(static_cast<unsigned long long>(p.lo)), " to ",
                                    detail::sizeText(static_cast<unsigned long long>(p.hi)));
        break;
      case ParamKind::kCount:
        info.range = detail::concat(static_cast<unsigned long long>(p.lo), " to ",
                                    static_cast<unsigned long long>(p.hi));
        break;
      case ParamKind::kBool:
        info.range = "0 or 1 (also false/true, no/yes)";
        break;
      case ParamKind::kChoice:
        info.range = detail::choiceList(p, "", ", ", " or ");
        break;
      case ParamKind::kSeconds:
        info.range =
            detail::concat(detail::numberText(p.lo), " (off) to ", detail::numberText(p.hi));
        break;
      case ParamKind::kString:
        info.range = "any text";
        break;
      case ParamKind::kAlgorithm:
        info.range = detail::choiceList(p, "", ", ", " or ") + ", or rules ALGO<SIZE,...,ALGO";
        break;
    }
    bool inConfig = !std::holds_alternative<std::monostate>(p.member);
    info.defaultValue = inConfig ? detail::valueText(p, defaults, false) : p.defaultText;
    info.doc = p.doc;
    info.mustAgree = p.mustAgree;
    info.scope = kScopes[static_cast<int>(p.scope)];
    info.inCStruct = p.c.type != detail::CType::kNone;
    out.push_back(std::move(info));
  }
  return out;
}

std::string paramValue(const Config& config, const std::string& name) {
  for (const Param& p : detail::paramTable())
    if (name == p.env) return detail::valueText(p, config, false);
  detail::fail(priocclInvalidArgument, "'", name, "' is not a PRIOCCL_* parameter");
}

}  // namespace prioccl
