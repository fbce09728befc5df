#include "harness/cli/reset_command.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "emulator/wire/shm_registry.h"
#include "harness/cli/exit_codes.h"
#include "harness/cli/usage.h"

namespace softverbs::cli {

int reset_command(std::span<char* const> args) {
  bool force = false;
  for (const char* arg : args) {
    const std::string_view word = arg;
    if (word == "-h" || word == "--help") {
      print_reset_usage(stdout);
      return kExitSuccess;
    }
    if (word == "--force") {
      force = true;
      continue;
    }
    return usage_error("reset: unexpected argument '" + std::string(word) + "'",
                       "type: softverbs reset [--force]");
  }
  ShmRegistry::ResetReport report;
  const Errno err = ShmRegistry::reset(force, report);
  if (err == EBUSY) {
    std::string pids;
    for (uint32_t pid : report.attached_pids) pids += " " + std::to_string(pid);
    std::fprintf(stderr,
                 "softverbs: reset: %s is in use by softverbs processes (pids:%s); stop them "
                 "first, or run 'softverbs reset --force' (they keep running but cannot reach "
                 "programs started afterwards)\n",
                 report.registry.c_str(), pids.empty() ? " unknown" : pids.c_str());
    return kExitFailure;
  }
  if (err != 0) {
    std::fprintf(stderr, "softverbs: reset: %s\n", std::strerror(err));
    return kExitFailure;
  }
  if (report.removed.empty()) std::printf("nothing to remove (no %s)\n", report.registry.c_str());
  for (const std::string& path : report.removed) std::printf("removed %s\n", path.c_str());
  return kExitSuccess;
}

}  // namespace softverbs::cli
