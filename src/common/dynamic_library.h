// Loading an optional library at run time (dlopen), for the CUDA runtime and NCCL: prioccl builds
// with their headers only, and a process without them fails only the feature that needs them.
#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>

#include "common/error.h"

namespace prioccl::detail {

// The first of `names` that loads; each failure is appended to `tried` ("name: why; ...").
inline void* openFirstLibrary(std::initializer_list<const char*> names, std::string* tried) {
  for (const char* name : names) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
    *tried += concat(tried->empty() ? "" : "; ", name, ": ", dlerror());
  }
  return nullptr;
}

// *out = the symbol; the first missing one is named in *missing.
template <typename F>
bool bindSymbol(void* lib, const char* symbol, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(lib, symbol));
  if (!*out && missing->empty()) *missing = concat("symbol ", symbol, " not found");
  return *out != nullptr;
}

// The toolkit's directory as the build found it (CMake's PRIOCCL_CUDA_LIBDIR), for the last try:
// a library there is found even when the loader's path does not name that directory.
#ifdef PRIOCCL_CUDA_LIBDIR
#define PRIOCCL_CUDA_LIBRARY(name) PRIOCCL_CUDA_LIBDIR "/" name
#else
#define PRIOCCL_CUDA_LIBRARY(name) name
#endif

// The CUDA runtime: the one the process has (a framework's libcudart is found by its soname),
// else any of the major versions prioccl is built against, else the toolkit's.
inline void* openCudaRuntime(std::string* tried) {
  return openFirstLibrary(
      {"libcudart.so", "libcudart.so.13", "libcudart.so.12", PRIOCCL_CUDA_LIBRARY("libcudart.so")},
      tried);
}

}  // namespace prioccl::detail
