#include "provider/real_library.h"

#include <dlfcn.h>

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

const RealLibrary& real_library() {
  static const RealLibrary library = [] {
    RealLibrary lib;
    // RTLD_GLOBAL so the one copy stays shared with whoever else loads it.
    lib.handle = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib.handle) {
      const char* why = dlerror();
      lib.error = why ? why : "dlopen(libibverbs.so.1) failed";
    }
    return lib;
  }();
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
