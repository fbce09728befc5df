// What a load run leaves in /dev/shm: under softverbs, the segments of
// SOFTVERBS_SHM_PREFIX once every process has ended (none, when the last
// one to leave cleaned up after the others, killed ones included).
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace softverbs::load {

// "PREFIX-UID-" for `prefix`, or SOFTVERBS_SHM_PREFIX's; "" when that is
// not set.
inline std::string shm_stem(const char* prefix = std::getenv("SOFTVERBS_SHM_PREFIX")) {
  if (!prefix || !*prefix) return {};
  return std::string(prefix) + "-" + std::to_string(geteuid()) + "-";
}

// Runs that write into or count the segments of their prefix need one of
// their own: false, with `program` and `why` said, when none is set.
inline bool require_own_shm_prefix(const char* program, const char* why) {
  if (!shm_stem().empty()) return true;
  std::fprintf(stderr, "%s: set SOFTVERBS_SHM_PREFIX to a name of this run's own%s\n", program, why);
  return false;
}

inline std::vector<std::string> shm_segments(const char* prefix = std::getenv("SOFTVERBS_SHM_PREFIX")) {
  const std::string stem = shm_stem(prefix);
  if (stem.empty()) return {};
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec))
    if (entry.path().filename().string().rfind(stem, 0) == 0) found.push_back(entry.path());
  return found;
}

}  // namespace softverbs::load
