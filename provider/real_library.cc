#include "provider/real_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace softverbs::provider {
namespace {

struct SymbolVersion {
  const char* name;
  const char* node;
};

// Every name the installed libibverbs exports at a default public node, and
// ibv_query_gid_type at its private node.
constexpr SymbolVersion kSymbolVersions[] = {
#include "real_symbol_versions.inc"
};

struct RealLibrary {
  void* handle = nullptr;
  std::string error;
};

// True when `handle` is this library or the shim in front of it: what
// dlopen("libibverbs.so.1") gives under `softverbs run`.
bool is_softverbs(void* handle) {
  void* found = dlsym(handle, "ibv_get_device_list");
  Dl_info found_info{}, own_info{};
  return found && dladdr(found, &found_info) &&
         dladdr(reinterpret_cast<void*>(&real_symbol), &own_info) &&
         found_info.dli_fbase == own_info.dli_fbase;
}

RealLibrary open_real_library() {
  RealLibrary lib;
  // `softverbs run` names the system library's file, since the name
  // libibverbs.so.1 then stands for the shim in front of softverbs.
  const char* path = std::getenv("SOFTVERBS_REAL_LIBIBVERBS");
  if (!path || !*path) path = "libibverbs.so.1";
  // RTLD_GLOBAL so the one copy stays shared with whoever else loads it.
  lib.handle = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!lib.handle) {
    const char* why = dlerror();
    lib.error = why ? why : "dlopen(libibverbs.so.1) failed";
  } else if (is_softverbs(lib.handle)) {
    dlclose(lib.handle);
    lib.handle = nullptr;
    lib.error = std::string(path) +
                " is softverbs itself; set SOFTVERBS_REAL_LIBIBVERBS to the system "
                "libibverbs.so.1's path";
  }
  return lib;
}

const RealLibrary& real_library() {
  static const RealLibrary library = open_real_library();
  return library;
}

const char* node_of(const char* name) {
  for (const auto& entry : kSymbolVersions)
    if (std::strcmp(entry.name, name) == 0) return entry.node;
  return nullptr;
}

}  // namespace

void* real_symbol(const char* name) {
  const RealLibrary& lib = real_library();
  if (!lib.handle) return nullptr;
  const char* node = node_of(name);
  if (!node) return nullptr;
  return dlvsym(lib.handle, name, node);
}

const char* real_library_error() { return real_library().error.c_str(); }

}  // namespace softverbs::provider
