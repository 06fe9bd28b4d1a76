// The parameter table (src/api/params.cpp): every row is read from the environment, merged from
// priocclConfig_t, validated, described and compared across ranks by the table's loops; and the
// docs list exactly its knobs (ParamsDocs: CTest's unit.params_docs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "api/params.h"
#include "common/same_everywhere.h"
#include "prioccl/prioccl.hpp"

namespace {

using prioccl::detail::Param;
using prioccl::detail::ParamKind;
using prioccl::detail::paramTable;

struct EnvVar {
  const char* name;
  EnvVar(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvVar() { unsetenv(name); }
};

bool inConfig(const Param& p) {
  return !std::holds_alternative<std::monostate>(p.member);
}

// A valid value other than the default, as the variable would be written.
std::string otherValue(const Param& p) {
  switch (p.kind) {
    case ParamKind::kSize:
    case ParamKind::kSizeOrAuto:
      return "8K";
    case ParamKind::kCount:
      return "7";
    case ParamKind::kBool:
      return prioccl::paramValue(prioccl::Config(), p.env) == "1" ? "0" : "yes";
    case ParamKind::kChoice:
    case ParamKind::kAlgorithm:
      return p.choices.back().alias ? p.choices[1].text : p.choices.back().text;
    case ParamKind::kSeconds:
      return "12.5";
    case ParamKind::kString:
      return "some/path.json";
  }
  return "";
}

// The max all-reduce of values and their flips, done here by hand over three ranks' vectors.
template <typename T>
long disagreementOver(const std::vector<std::vector<T>>& ranks, T* lo, T* hi) {
  std::vector<T> maxima;
  for (const auto& values : ranks) {
    std::vector<T> sent = prioccl::detail::withFlips(values);
    if (maxima.empty()) maxima = sent;
    for (size_t i = 0; i < sent.size(); ++i) maxima[i] = std::max(maxima[i], sent[i]);
  }
  return prioccl::detail::firstDisagreement(maxima, ranks.at(0).size(), lo, hi);
}

TEST(SameEverywhere, FindsTheFirstValueThatDiffersWithItsRange) {
  long long lo = 0, hi = 0;
  constexpr long long kMin = std::numeric_limits<long long>::min();
  constexpr long long kMax = std::numeric_limits<long long>::max();
  EXPECT_EQ(
      disagreementOver<long long>({{kMin, 5, kMax}, {kMin, 5, kMax}, {kMin, 5, kMax}}, &lo, &hi),
      -1)
      << "the extremes of int64 compare exactly";
  EXPECT_EQ(disagreementOver<long long>({{1, 5, 7}, {1, kMin, 9}, {1, 6, 8}}, &lo, &hi), 1);
  EXPECT_EQ(lo, kMin);
  EXPECT_EQ(hi, 6);
  double dlo = 0, dhi = 0;
  EXPECT_EQ(disagreementOver<double>({{0.5, -2}, {0.5, -2}}, &dlo, &dhi), -1);
  EXPECT_EQ(disagreementOver<double>({{0.5, -2}, {0.5, -3}, {0.5, 1e300}}, &dlo, &dhi), 1);
  EXPECT_EQ(dlo, -3);
  EXPECT_EQ(dhi, 1e300);
}

TEST(Params, RowsAreWellFormed) {
  std::set<std::string> names, fields;
  for (const Param& p : paramTable()) {
    SCOPED_TRACE(p.env);
    EXPECT_EQ(std::string(p.env).rfind("PRIOCCL_", 0), 0u);
    EXPECT_TRUE(names.insert(p.env).second) << "duplicate variable";
    EXPECT_GT(std::strlen(p.doc), 10u);
    EXPECT_EQ(std::strchr(p.doc, '|'), nullptr) << "breaks the Markdown table";
    if (inConfig(p)) {
      EXPECT_GT(std::strlen(p.field), 0u);
      EXPECT_TRUE(fields.insert(p.field).second) << "duplicate field";
      EXPECT_EQ(p.scope, prioccl::detail::ParamScope::kCommunicator);
      EXPECT_STREQ(p.defaultText, "") << "Config's initialiser is the default";
    } else {
      EXPECT_EQ(p.c.type, prioccl::detail::CType::kNone) << "a C field needs a Config member";
      EXPECT_FALSE(p.mustAgree);
      EXPECT_GT(std::strlen(p.defaultText), 0u);
    }
    // The loops dispatch on the member's type: a kind must fit it.
    std::visit(
        [&](auto m) {
          using M = decltype(m);
          if constexpr (!std::is_same_v<M, std::monostate>) {
            using T = std::remove_reference_t<decltype(std::declval<prioccl::Config&>().*m)>;
            if constexpr (std::is_same_v<T, size_t>) {
              EXPECT_TRUE(p.kind == ParamKind::kSize || p.kind == ParamKind::kSizeOrAuto ||
                          p.kind == ParamKind::kCount);
              // 0 is "auto" for kSizeOrAuto; a plain size or count may allow it only as "off".
              if (p.lo < 1) {
                EXPECT_TRUE(p.kind == ParamKind::kSize || p.kind == ParamKind::kCount);
                EXPECT_NE(std::string(p.doc).find("0 = off"), std::string::npos) << p.doc;
              }
              EXPECT_GE(p.lo, 0);
              EXPECT_GE(p.hi, p.lo);
            } else if constexpr (std::is_same_v<T, bool>) {
              EXPECT_EQ(p.kind, ParamKind::kBool);
            } else if constexpr (std::is_same_v<T, double>) {
              EXPECT_EQ(p.kind, ParamKind::kSeconds);
            } else if constexpr (std::is_same_v<T, std::string>) {
              EXPECT_EQ(p.kind, ParamKind::kString);
            } else {
              EXPECT_TRUE(p.kind == ParamKind::kChoice || p.kind == ParamKind::kAlgorithm);
              EXPECT_FALSE(p.choices.empty());
            }
          }
        },
        p.member);
    if (p.kind == ParamKind::kChoice && inConfig(p)) {
      EXPECT_GT(std::strlen(p.cTypeName), 0u);
    }
  }
}

TEST(Params, EveryConfigRowIsReadFromTheEnvironment) {
  for (const Param& p : paramTable()) {
    if (!inConfig(p)) continue;
    SCOPED_TRACE(p.env);
    std::string before = prioccl::paramValue(prioccl::Config::fromEnv(), p.env);
    EnvVar v(p.env, otherValue(p).c_str());
    prioccl::Config c = prioccl::Config::fromEnv();
    EXPECT_NE(prioccl::paramValue(c, p.env), before);
    EXPECT_NE(c.describe().find(std::string(p.field) + "=" + prioccl::paramValue(c, p.env)),
              std::string::npos)
        << c.describe();
  }
}

TEST(Params, MalformedValuesNameTheVariableAndTheValue) {
  for (const Param& p : paramTable()) {
    if (!inConfig(p) || p.kind == ParamKind::kString) continue;
    SCOPED_TRACE(p.env);
    EnvVar v(p.env, "bogus");
    try {
      prioccl::Config::fromEnv();
      ADD_FAILURE() << "accepted bogus";
    } catch (const prioccl::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(p.env) + "='bogus'"), std::string::npos)
          << e.what();
    }
  }
  // Today's texts, which docs and users quote.
  EnvVar s("PRIOCCL_SCHEDULE", "lifo");
  try {
    prioccl::Config::fromEnv();
    ADD_FAILURE();
  } catch (const prioccl::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "PRIOCCL_SCHEDULE='lifo' is not 'priority' or 'fifo'");
  }
}

TEST(Params, ExactMessagesOfTheEnvironmentParsers) {
  auto message = [](const char* name, const char* value) {
    EnvVar v(name, value);
    try {
      prioccl::Config::fromEnv();
    } catch (const prioccl::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("PRIOCCL_CHUNK_BYTES", "2G"),
            "PRIOCCL_CHUNK_BYTES='2G' is not a size between 1 and 1073741824 (a number with an "
            "optional K, M or G suffix)");
  // Every algorithm the library has, by its public enum: "'auto', 'ring', ... or 'hd'".
  std::string algos;
  for (int a = priocclAlgoAuto; a < priocclNumAlgos; ++a)
    algos += std::string(a == priocclAlgoAuto       ? ""
                         : a + 1 == priocclNumAlgos ? " or "
                                                    : ", ") +
             "'" + prioccl::algorithmName(static_cast<priocclAlgorithm_t>(a)) + "'";
  EXPECT_EQ(message("PRIOCCL_ALGO", "fast"), "PRIOCCL_ALGO='fast' is not " + algos);
  EXPECT_EQ(message("PRIOCCL_TIMEOUT_S", "-1"),
            "PRIOCCL_TIMEOUT_S='-1' is not a number of seconds between 0 (off) and 1e9");
  EXPECT_EQ(message("PRIOCCL_CALIBRATE", "maybe"),
            "PRIOCCL_CALIBRATE='maybe' is not a boolean (1/0, true/false, yes/no)");
  EXPECT_EQ(message("PRIOCCL_CREDIT_BYTES", "auto"), "accepted");
  EXPECT_EQ(message("PRIOCCL_ALGO", "recursive_doubling"), "accepted");
  EXPECT_EQ(message("PRIOCCL_UCX_WAKEUP", "1"), "accepted");
}

TEST(Params, CStructMerge) {
  using prioccl::detail::mergeCConfig;
  prioccl::Config defaults;
  {
    priocclConfig_t untouched = PRIOCCL_CONFIG_INITIALIZER;
    prioccl::Config c;
    mergeCConfig(untouched, c);
    EXPECT_EQ(c.describe(), defaults.describe()) << "-1 everywhere keeps every value";
  }
  priocclConfig_t cfg = PRIOCCL_CONFIG_INITIALIZER;
  cfg.chunkBytes = 4096;
  cfg.windowChunks = 8;
  cfg.requireThreadMultiple = 0;
  cfg.schedule = priocclScheduleFifo;
  cfg.algorithm = priocclAlgoTree;
  cfg.transport = priocclTransportUcx;
  cfg.timeoutSeconds = 0;
  cfg.stallWarnSeconds = 2.5;
  prioccl::Config c;
  mergeCConfig(cfg, c);
  EXPECT_EQ(c.chunkBytes, 4096u);
  EXPECT_EQ(c.creditBytes, defaults.creditBytes);
  EXPECT_EQ(c.windowChunks, 8u);
  EXPECT_FALSE(c.requireThreadMultiple);
  EXPECT_EQ(c.schedule, priocclScheduleFifo);
  EXPECT_EQ(c.algorithm, priocclAlgoTree);
  EXPECT_EQ(c.transport, priocclTransportUcx);
  EXPECT_EQ(c.timeoutSeconds, 0);
  EXPECT_EQ(c.stallWarnSeconds, 2.5);
  // An older layout ends where a later field starts: nothing from there on is read.
  priocclConfig_t old = cfg;
  old.size = offsetof(priocclConfig_t, transport);
  old.timeoutSeconds = NAN;
  prioccl::Config o;
  mergeCConfig(old, o);
  EXPECT_EQ(o.algorithm, priocclAlgoTree);
  EXPECT_EQ(o.transport, defaults.transport);
  EXPECT_EQ(o.timeoutSeconds, defaults.timeoutSeconds);
  auto message = [](auto edit) {
    priocclConfig_t bad = PRIOCCL_CONFIG_INITIALIZER;
    edit(bad);
    prioccl::Config x;
    try {
      mergeCConfig(bad, x);
    } catch (const prioccl::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message([](priocclConfig_t& b) { b.chunkBytes = -2; }),
            "config->chunkBytes = -2 must be >= 0 (0 = auto)");
  EXPECT_EQ(message([](priocclConfig_t& b) { b.windowChunks = 0; }),
            "config->windowChunks = 0 must be > 0");
  EXPECT_EQ(message([](priocclConfig_t& b) { b.schedule = 2; }),
            "config->schedule = 2 is not a priocclSchedule_t");
  EXPECT_EQ(
      message([](priocclConfig_t& b) { b.algorithm = priocclNumAlgos; }),
      "config->algorithm = " + std::to_string(priocclNumAlgos) + " is not a priocclAlgorithm_t");
  EXPECT_EQ(message([](priocclConfig_t& b) { b.transport = -2; }),
            "config->transport = -2 is not a priocclTransport_t");
  EXPECT_EQ(message([](priocclConfig_t& b) { b.timeoutSeconds = 2e9; }),
            "config->timeoutSeconds = 2e+09 must be between 0 (off) and 1e9 seconds");
  EXPECT_EQ(message([](priocclConfig_t& b) { b.size = 3; }),
            "config->size is 3, expected " + std::to_string(sizeof(priocclConfig_t)) +
                ": initialise it with PRIOCCL_CONFIG_INITIALIZER");
  EXPECT_EQ(
      message([](priocclConfig_t& b) { b.size = offsetof(priocclConfig_t, stallWarnSeconds); }),
      "config->size is " + std::to_string(offsetof(priocclConfig_t, stallWarnSeconds)) +
          ", expected " + std::to_string(sizeof(priocclConfig_t)) +
          ": initialise it with PRIOCCL_CONFIG_INITIALIZER");
}

TEST(Params, ValidationNamesTheField) {
  auto message = [](auto edit) {
    prioccl::Config c;
    edit(c);
    try {
      prioccl::detail::validateConfig(c);
    } catch (const prioccl::InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message([](prioccl::Config&) {}), "accepted");
  EXPECT_EQ(message([](prioccl::Config& c) { c.chunkBytes = (1u << 30) + 1; }),
            "chunkBytes=1073741825 is outside [1, 1073741824] (0 = auto)");
  EXPECT_EQ(message([](prioccl::Config& c) { c.windowChunks = 0; }),
            "windowChunks=0 is outside [1, 1048576]");
  EXPECT_EQ(message([](prioccl::Config& c) { c.stallWarnSeconds = NAN; }),
            "stallWarnSeconds=nan is outside [0 (off), 1e9]");
  EXPECT_EQ(message([](prioccl::Config& c) { c.creditBytes = (1ULL << 40) + 1; }),
            "creditBytes=1099511627777 is outside [1, 1099511627776] (0 = auto)");
}

// What two ranks with configs a and b would conclude (the maxima of +/- each value).
std::string disagreementOf(const prioccl::Config& a, const prioccl::Config& b) {
  std::vector<double> x = prioccl::detail::agreementValues(a),
                      y = prioccl::detail::agreementValues(b);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::max(x[i], y[i]);
  return prioccl::detail::disagreement(x);
}

TEST(Params, CrossRankCheckNamesTheSettingAndBothValues) {
  prioccl::Config a, b;
  EXPECT_EQ(disagreementOf(a, b), "");
  b.creditBytes = 4096;  // not a must-agree setting
  b.schedule = priocclScheduleFifo;
  EXPECT_EQ(disagreementOf(a, b), "");
  b.chunkBytes = 65536;
  a.chunkBytes = 131072;
  EXPECT_EQ(disagreementOf(a, b),
            "ranks disagree on chunkBytes (PRIOCCL_CHUNK_BYTES / config.chunkBytes: 65536 to "
            "131072): every rank must use the same setting");
  b.chunkBytes = a.chunkBytes;
  a.transport = priocclTransportMpi;  // as communicators compare it: settled (auto resolved)
  b.transport = priocclTransportUcx;
  EXPECT_NE(disagreementOf(a, b).find("disagree on the transport (PRIOCCL_TRANSPORT / "
                                      "config.transport: mpi to ucx)"),
            std::string::npos);
  b.transport = a.transport;
  b.timeoutSeconds = 20;
  a.timeoutSeconds = 10;
  EXPECT_NE(disagreementOf(a, b).find("disagree on the timeout (PRIOCCL_TIMEOUT_S / "
                                      "config.timeoutSeconds: 10 s to 20 s)"),
            std::string::npos);
  b.timeoutSeconds = a.timeoutSeconds;
  b.algorithm = priocclAlgoTree;
  EXPECT_NE(disagreementOf(a, b).find("disagree on the algorithm (PRIOCCL_ALGO / "
                                      "config.algorithm / config.algorithmRules: auto to tree)"),
            std::string::npos);
  b.algorithm = a.algorithm;
  b.algorithmRules = "rd<64K,tree";
  EXPECT_NE(disagreementOf(a, b).find("disagree on the algorithm"), std::string::npos);
  a.algorithmRules = "rd<64K,ring";
  EXPECT_NE(disagreementOf(a, b).find("disagree on the algorithm"), std::string::npos);
  a.algorithmRules = b.algorithmRules;
  EXPECT_EQ(disagreementOf(a, b), "");
}

TEST(Params, PublicListing) {
  std::vector<prioccl::ParamInfo> all = prioccl::params();
  ASSERT_EQ(all.size(), paramTable().size());
  std::map<std::string, prioccl::ParamInfo> byName;
  for (const auto& p : all) byName.emplace(p.name, p);
  EXPECT_EQ(byName.at("PRIOCCL_CHUNK_BYTES").defaultValue, "auto");
  EXPECT_EQ(byName.at("PRIOCCL_CHUNK_BYTES").range, "auto, or 1 to 1G");
  EXPECT_TRUE(byName.at("PRIOCCL_CHUNK_BYTES").mustAgree);
  EXPECT_TRUE(byName.at("PRIOCCL_CHUNK_BYTES").inCStruct);
  EXPECT_FALSE(byName.at("PRIOCCL_CALIBRATE").inCStruct);
  EXPECT_STREQ(byName.at("PRIOCCL_DEBUG").scope, "process");
  EXPECT_EQ(byName.at("PRIOCCL_DEBUG").range, "WARN, INFO or TRACE");
  {
    EnvVar d("PRIOCCL_DEBUG", "INFO");
    EXPECT_EQ(prioccl::paramValue(prioccl::Config(), "PRIOCCL_DEBUG"), "INFO");
  }
  EXPECT_EQ(prioccl::paramValue(prioccl::Config(), "PRIOCCL_DEBUG"), "unset");
  EXPECT_THROW(prioccl::paramValue(prioccl::Config(), "PRIOCCL_NOPE"), prioccl::InvalidArgument);
}

// ---- unit.params_docs ----------------------------------------------------------------------

// The `| \`PRIOCCL_X\` | default | ... |` rows of the first table after `heading` in `file`.
std::map<std::string, std::string> docTable(const std::string& file, const std::string& heading) {
  std::ifstream in(std::string(PRIOCCL_SOURCE_DIR) + "/" + file);
  EXPECT_TRUE(in) << file;
  std::map<std::string, std::string> rows;
  std::string line;
  bool inSection = false, inTable = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      if (inSection) break;
      inSection = line == heading;
      continue;
    }
    if (!inSection) continue;
    if (line.rfind("| `PRIOCCL_", 0) != 0) {
      if (inTable && line.rfind("|", 0) != 0) break;  // the table ended
      continue;
    }
    inTable = true;
    size_t nameEnd = line.find('`', 3);
    size_t defStart = line.find("| ", nameEnd) + 2;
    size_t defEnd = line.find(" |", defStart);
    std::string name = line.substr(3, nameEnd - 3);
    EXPECT_TRUE(rows.emplace(name, line.substr(defStart, defEnd - defStart)).second)
        << file << " lists " << name << " twice";
  }
  EXPECT_FALSE(rows.empty()) << file << ": no table under '" << heading << "'";
  return rows;
}

std::map<std::string, std::string> tableDefaults() {
  std::map<std::string, std::string> out;
  for (const prioccl::ParamInfo& p : prioccl::params()) out[p.name] = p.defaultValue;
  return out;
}

// docs/usage.md lists exactly the table's knobs with its defaults: a knob added to the table
// without docs (or documented without a row) fails here. `prioccl_info --markdown` prints rows.
TEST(ParamsDocs, UsageTableEqualsTheParameterTable) {
  std::map<std::string, std::string> doc = docTable("docs/usage.md", "## Configuration in full"),
                                     table = tableDefaults();
  for (const auto& [name, def] : table) {
    auto it = doc.find(name);
    if (it == doc.end()) {
      ADD_FAILURE() << name << " is in the parameter table but not in docs/usage.md";
      continue;
    }
    EXPECT_EQ(it->second, def) << name << ": default in docs/usage.md vs the table";
  }
  for (const auto& [name, def] : doc)
    EXPECT_TRUE(table.count(name)) << name << " is in docs/usage.md but not in the table";
}

// README's short table may leave knobs out, but what it lists must exist, with the same default.
TEST(ParamsDocs, ReadmeTableIsASubset) {
  std::map<std::string, std::string> doc = docTable("README.md", "## Environment variables"),
                                     table = tableDefaults();
  for (const auto& [name, def] : doc) {
    auto it = table.find(name);
    if (it == table.end()) {
      ADD_FAILURE() << name << " is in README.md but not in the parameter table";
      continue;
    }
    EXPECT_EQ(def, it->second) << name << ": default in README.md vs the table";
  }
}

}  // namespace
