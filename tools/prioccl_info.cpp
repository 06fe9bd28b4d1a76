// prioccl_info: prints prioccl's configuration knobs, in the manner of `ucx_info -c`.
//   prioccl_info -c          every PRIOCCL_* variable with its value here (environment or default)
//   prioccl_info --markdown  the table of docs/usage.md ("Configuration in full")
// The list is the library's parameter table (prioccl::params()): plain data, so this needs
// neither MPI initialisation nor a communicator.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "prioccl/prioccl.hpp"

namespace {

constexpr const char* kUsage =
    "usage: prioccl_info [-c | --markdown | -h]\n"
    "  -c, --config   every PRIOCCL_* variable: its value here (from the environment, or the\n"
    "                 default), default, accepted values, whether ranks must agree, meaning\n"
    "  --markdown     the same as a Markdown table (variable | default | meaning)\n";

// Values as the environment gives them: a malformed variable is reported, and the others still
// listed (with the raw text of the bad one), since finding it is what this tool is for.
int printConfig() {
  prioccl::Config config;
  std::string error;
  try {
    config = prioccl::Config::fromEnv();
  } catch (const prioccl::Error& e) {
    error = e.what();
  }
  std::printf("# prioccl %d.%d.%d configuration (PRIOCCL_* environment over the defaults)\n",
              PRIOCCL_MAJOR, PRIOCCL_MINOR, PRIOCCL_PATCH);
  for (const prioccl::ParamInfo& p : prioccl::params()) {
    std::string value;
    const char* env = std::getenv(p.name);
    if (!error.empty() && env && *env)
      value = env;  // fromEnv failed: show what was given rather than a value not in force
    else
      value = prioccl::paramValue(config, p.name);
    std::string where = p.scope;
    if (*p.field) where += std::string(", Config::") + p.field;
    if (p.inCStruct) where += ", priocclConfig_t";
    if (!(env && *env) && value == "unset") value.clear();  // NAME= as ucx_info prints it
    std::printf("#\n# %s\n#   default %s; %s: %s; %s%s\n%s=%s\n", p.doc, p.defaultValue.c_str(),
                p.kind, p.range.c_str(), where.c_str(), p.mustAgree ? "; same on every rank" : "",
                p.name, value.c_str());
  }
  if (!error.empty()) {
    std::fprintf(stderr, "prioccl_info: %s\n", error.c_str());
    return 1;
  }
  return 0;
}

// docs/usage.md's table; unit.params_docs checks that the two name the same knobs and defaults.
int printMarkdown() {
  std::printf("| variable | default | meaning |\n|---|---|---|\n");
  for (const prioccl::ParamInfo& p : prioccl::params())
    std::printf("| `%s` | %s | %s%s |\n", p.name, p.defaultValue.c_str(), p.doc,
                p.mustAgree ? "; must be the same on every rank (checked at creation)" : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (!std::strcmp(argv[1], "-c") || !std::strcmp(argv[1], "--config")))
    return printConfig();
  if (argc == 2 && !std::strcmp(argv[1], "--markdown")) return printMarkdown();
  bool help = argc == 2 && (!std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help"));
  std::fputs(kUsage, help ? stdout : stderr);
  return help ? 0 : 2;
}
