// Loading an optional library at run time (dlopen), for the CUDA runtime and NCCL: prioccl builds
// with their headers only, and a process without them fails only the feature that needs them.
#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <string>
#include <vector>

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

// The CUDA runtime's sonames in the order they are tried: the major version prioccl was built
// against first, then the other one it supports, then the unversioned development link (any
// version), then the toolkit's own.
inline std::vector<std::string> cudaRuntimeNames(int builtMajor) {
  std::vector<std::string> names;
  for (int major : {builtMajor, builtMajor == 13 ? 12 : 13})
    if (major > 0) names.push_back(concat("libcudart.so.", major));
  names.push_back("libcudart.so");
  names.push_back(PRIOCCL_CUDA_LIBRARY("libcudart.so"));
  return names;
}

#ifndef PRIOCCL_CUDART_MAJOR
#define PRIOCCL_CUDART_MAJOR 0
#endif

// The CUDA runtime: the one the process already has (a framework's libcudart, found loaded by
// RTLD_NOLOAD under any of the names: two runtimes in one process would not share streams or
// contexts' state), else the first of cudaRuntimeNames that loads.
inline void* openCudaRuntime(std::string* tried) {
  const std::vector<std::string> names = cudaRuntimeNames(PRIOCCL_CUDART_MAJOR);
  for (const std::string& name : names)
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) return h;
  for (const std::string& name : names) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    *tried += concat(tried->empty() ? "" : "; ", name, ": ", dlerror());
  }
  return nullptr;
}

}  // namespace prioccl::detail
