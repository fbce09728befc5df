#include "harness/cli/provider_library.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace softverbs::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kLibraryName = "libsoftverbs.so";

fs::path executable_directory() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

bool is_existing_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

std::string absolute_normal(const fs::path& path) {
  std::error_code ec;
  fs::path canonical = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return (ec ? path : canonical).string();
}

}  // namespace

LibraryLookup find_provider_library() {
  LibraryLookup lookup;
  if (const char* env = std::getenv("SOFTVERBS_LIBRARY"); env && *env) {
    lookup.from_environment = true;
    lookup.searched.push_back(env);
    if (is_existing_file(env)) lookup.path = absolute_normal(env);
    return lookup;
  }
  const fs::path exe_dir = executable_directory();
  if (exe_dir.empty()) return lookup;
  const fs::path candidates[] = {
      exe_dir / ".." / ".." / "provider" / kLibraryName,  // build tree
      exe_dir / ".." / "lib" / kLibraryName,              // installed
  };
  for (const fs::path& candidate : candidates) {
    lookup.searched.push_back(absolute_normal(candidate));
    if (is_existing_file(candidate)) {
      lookup.path = lookup.searched.back();
      break;
    }
  }
  return lookup;
}

std::string describe_missing_library(const LibraryLookup& lookup) {
  std::string text;
  if (lookup.from_environment) {
    text = "SOFTVERBS_LIBRARY=" + lookup.searched.front() + " is not a file.\n";
    text += "Point it at a built libsoftverbs.so, or unset it to use the one next to this program.";
    return text;
  }
  text = std::string(kLibraryName) + " not found; looked for:\n";
  for (const std::string& place : lookup.searched) text += "  " + place + "\n";
  text +=
      "Build it with `bash scripts/build.sh` (or `ninja -C BUILD_DIR softverbs_provider`),\n"
      "or set SOFTVERBS_LIBRARY=/path/to/libsoftverbs.so.";
  return text;
}

std::string compose_ld_preload(const std::vector<std::string>& preloads, const char* existing) {
  std::vector<std::string> entries = preloads;
  if (existing) {
    std::string_view rest = existing;
    while (!rest.empty()) {
      const std::size_t end = std::min(rest.find_first_of(": "), rest.size());
      const std::string entry(rest.substr(0, end));
      rest.remove_prefix(std::min(end + 1, rest.size()));
      if (!entry.empty() && std::find(entries.begin(), entries.end(), entry) == entries.end())
        entries.push_back(entry);
    }
  }
  std::string value;
  for (const std::string& entry : entries) {
    if (!value.empty()) value += ':';
    value += entry;
  }
  return value;
}

bool is_preloadable_path(const std::string& path) {
  return !path.empty() && path.find_first_of(": ") == std::string::npos;
}

}  // namespace softverbs::cli
