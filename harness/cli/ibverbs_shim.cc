#include "harness/cli/ibverbs_shim.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <system_error>

namespace softverbs::cli {
namespace {

namespace fs = std::filesystem;

std::string canonical_or_empty(const fs::path& path) {
  std::error_code ec;
  fs::path canonical = fs::canonical(path, ec);
  return ec ? std::string() : canonical.string();
}

// The file the dynamic loader maps for "libibverbs.so.1" here (honouring
// LD_LIBRARY_PATH and the ld cache, as it will for the program).
std::string loader_choice_of_libibverbs() {
  void* handle = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!handle) return {};
  std::string path;
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name)
    path = canonical_or_empty(map->l_name);
  dlclose(handle);
  return path;
}

}  // namespace

IbverbsShim find_ibverbs_shim(const std::string& provider_library) {
  IbverbsShim shim;
  if (const char* off = std::getenv("SOFTVERBS_IBVERBS_SHIM"); off && std::string_view(off) == "0") {
    shim.problem = "SOFTVERBS_IBVERBS_SHIM=0";
    return shim;
  }
  const fs::path candidate = fs::path(provider_library).parent_path() / "ibverbs-shim" /
                             "libibverbs.so.1";
  shim.shim_path = canonical_or_empty(candidate);
  if (shim.shim_path.empty()) {
    shim.problem = candidate.string() + " is missing";
    return shim;
  }
  const char* named = std::getenv("SOFTVERBS_REAL_LIBIBVERBS");
  shim.real_path = named && *named ? canonical_or_empty(named) : loader_choice_of_libibverbs();
  // Under an outer `softverbs run` the name already stands for the shim.
  if (shim.real_path == shim.shim_path || shim.real_path == canonical_or_empty(provider_library))
    shim.real_path.clear();
  return shim;
}

}  // namespace softverbs::cli
