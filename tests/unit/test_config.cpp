// PRIOCCL_* environment parsing: sizes with suffixes, clear errors for malformed values.
#include <gtest/gtest.h>

#include <cstdlib>

#include "prioccl/prioccl.hpp"

namespace {

struct EnvVar {
  const char* name;
  EnvVar(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvVar() { unsetenv(name); }
};

TEST(Config, DefaultsWithoutEnvironment) {
  prioccl::Config c = prioccl::Config::fromEnv();
  EXPECT_EQ(c.chunkBytes, prioccl::Config().chunkBytes);
  EXPECT_EQ(c.creditBytes, prioccl::Config().creditBytes);
  EXPECT_TRUE(c.requireThreadMultiple);
}

TEST(Config, SizesAndSuffixes) {
  EnvVar a("PRIOCCL_CHUNK_BYTES", "256k");
  EnvVar b("PRIOCCL_CREDIT_BYTES", "8MiB");
  EnvVar w("PRIOCCL_WINDOW_CHUNKS", "64");
  EnvVar t("PRIOCCL_MPI_THREAD_CHECK", "0");
  prioccl::Config c = prioccl::Config::fromEnv();
  EXPECT_EQ(c.chunkBytes, 256u * 1024);
  EXPECT_EQ(c.creditBytes, 8u << 20);
  EXPECT_EQ(c.windowChunks, 64u);
  EXPECT_FALSE(c.requireThreadMultiple);
  EXPECT_NE(c.describe().find("chunkBytes=262144"), std::string::npos);
}

TEST(Config, MalformedValuesAreErrorsNamingTheVariable) {
  for (const char* bad : {"abc", "-5", "0", "12q", "4MX", "2G0", "99999999999999999999"}) {
    EnvVar a("PRIOCCL_CHUNK_BYTES", bad);
    try {
      prioccl::Config::fromEnv();
      ADD_FAILURE() << "accepted PRIOCCL_CHUNK_BYTES=" << bad;
    } catch (const prioccl::InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("PRIOCCL_CHUNK_BYTES"), std::string::npos) << e.what();
      EXPECT_EQ(e.code(), priocclInvalidArgument);
    }
  }
  EnvVar t("PRIOCCL_MPI_THREAD_CHECK", "maybe");
  EXPECT_THROW(prioccl::Config::fromEnv(), prioccl::InvalidArgument);
}

TEST(Config, ChunkAboveOneGiBRejected) {
  EnvVar a("PRIOCCL_CHUNK_BYTES", "2G");
  EXPECT_THROW(prioccl::Config::fromEnv(), prioccl::InvalidArgument);
}

}  // namespace
