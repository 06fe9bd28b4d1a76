// The parameter table: one row per PRIOCCL_* knob, and the loops that used to be written out
// field by field (environment parsing, the C struct merge, validation, describe(), the cross-rank
// agreement). Adding a knob means a row in params.cpp plus its field in Config (prioccl.hpp) and,
// if C may set it, in priocclConfig_t and PRIOCCL_CONFIG_INITIALIZER (prioccl.h).
//
// Read at communicator creation only, never on the hot path: the rows are plain data walked with
// a switch, and nothing here is cached between communicators.
#pragma once

#include <cstddef>
#include <string>
#include <variant>
#include <vector>

#include "prioccl/prioccl.hpp"

namespace prioccl::detail {

enum class ParamKind {
  kSize,        // bytes, K/M/G/T suffixes (common/parse_size.h), within [lo, hi]
  kSizeOrAuto,  // as kSize, or "auto"/"0": derived at creation (Config::resolveAuto)
  kCount,       // a number of things, same syntax as kSize
  kBool,        // 1/0, true/false, yes/no
  kChoice,      // one of `choices` (case-insensitive)
  kSeconds,     // non-negative decimal seconds within [lo, hi]; 0 = off
  kString,      // taken as given
  kAlgorithm,   // a choice, or size rules "ALGO<SIZE,...,ALGO" (into Config::algorithmRules)
};

enum class ParamScope {
  kCommunicator,  // a Config field, read at each communicator's creation
  kProcess,       // read once per process, before any Config exists (logging: log.cpp)
  kPython,        // read by the Python package only (python/prioccl/_lib.py)
};

// The C struct field of a row: its type and offset in priocclConfig_t.
enum class CType { kNone, kLongLong, kInt, kDouble };
struct CField {
  CType type = CType::kNone;
  size_t offset = 0;
  // The field starts a newer layout: a struct whose `size` ends where this field starts is an
  // application built against the older prioccl.h, and it and later fields are not read.
  bool newLayout = false;
};

struct ParamChoice {
  const char* text;
  int value;
  bool alias = false;  // accepted, but not listed in messages or docs ("recursive_doubling")
};

using ConfigMember =
    std::variant<std::monostate, size_t Config::*, bool Config::*, double Config::*,
                 std::string Config::*, priocclSchedule_t Config::*, priocclAlgorithm_t Config::*,
                 priocclTransport_t Config::*>;

struct Param {
  const char* env;    // PRIOCCL_CHUNK_BYTES
  const char* field;  // chunkBytes: the member of Config and priocclConfig_t ("" when none)
  ParamKind kind;
  double lo, hi;        // accepted range of kSize, kSizeOrAuto (besides auto), kCount, kSeconds
  ConfigMember member;  // std::monostate: read outside Config (see `scope`)
  CField c;             // CType::kNone: not settable through priocclConfig_t
  bool mustAgree;       // compared across ranks at creation (a mismatch fails on every rank)
  ParamScope scope;
  const char* doc;                     // one line: prioccl_info -c and --markdown
  std::vector<ParamChoice> choices{};  // kChoice, kAlgorithm
  const char* cTypeName = "";          // kChoice in C: "priocclSchedule_t"
  const char* agreeLabel = "";         // cross-rank error: "the transport" ("" = field)
  const char* defaultText = "";        // rows outside Config: as documented ("unset")
};

// Every knob, in the order describe() prints them.
const std::vector<Param>& paramTable();

// The loops over the table.
void readEnv(Config& c);  // throws InvalidArgument naming the variable, value and accepted range
void mergeCConfig(const priocclConfig_t& config, Config& c);  // fields left at -1 keep c's
void validateConfig(const Config& c);         // range checks of a C++ Config, naming the field
std::string describeParams(const Config& c);  // "chunkBytes=... creditBytes=... ..."

// The cross-rank check: agreementValues() gives, per mustAgree row in table order, v and -v;
// after an all-reduce (MAX) of them, disagreement() is "" when every rank had the same value,
// else the error message naming the first differing setting and the range of values seen.
std::vector<double> agreementValues(const Config& c);
std::string disagreement(const std::vector<double>& maxima);

// A size in [lo, hi], or InvalidArgument naming `name` and the text (parseAlgorithmRules too).
unsigned long long parseSizeNamed(const char* name, const char* text, unsigned long long lo,
                                  unsigned long long hi);

}  // namespace prioccl::detail
