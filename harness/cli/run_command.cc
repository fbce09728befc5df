#include "harness/cli/run_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "harness/cli/device_option.h"
#include "harness/cli/exit_codes.h"
#include "harness/cli/ibverbs_shim.h"
#include "harness/cli/provider_library.h"
#include "harness/cli/usage.h"

namespace softverbs::cli {
namespace {

constexpr std::string_view kRunHint =
    "type: softverbs run [--devices N] -- PROGRAM [ARGS...]   (see softverbs help run)";

std::string join_words(std::span<char* const> words) {
  std::string text;
  for (const char* word : words) {
    if (!text.empty()) text += ' ';
    text += word;
  }
  return text;
}

// Libraries that must be preloaded before libsoftverbs.so itself. A build
// with AddressSanitizer needs its runtime first in the list of libraries, and
// the programs softverbs runs are usually not built with it.
std::vector<std::string> runtime_preloads() {
#ifdef SOFTVERBS_SANITIZER_RUNTIME
  return {SOFTVERBS_SANITIZER_RUNTIME};
#else
  return {};
#endif
}

// The shim and the system library go after libsoftverbs.so, in that order:
// the first file preloaded with the soname libibverbs.so.1 is what that name
// means from then on. Without the shim a program that dlopen()s
// libibverbs.so.1 itself sees only the system library.
void add_ibverbs_shim(const std::string& library, std::vector<std::string>& preloads) {
  const IbverbsShim shim = find_ibverbs_shim(library);
  if (!shim.problem.empty() || !is_preloadable_path(shim.shim_path)) return;
  if (!shim.real_path.empty() && !is_preloadable_path(shim.real_path)) return;
  preloads.push_back(shim.shim_path);
  if (shim.real_path.empty()) return;
  preloads.push_back(shim.real_path);
  ::setenv("SOFTVERBS_REAL_LIBIBVERBS", shim.real_path.c_str(), /*overwrite=*/1);
}

int exec_program(std::span<char* const> program_and_args) {
  // execvp wants a null-terminated, mutable-looking argv.
  std::vector<char*> argv(program_and_args.begin(), program_and_args.end());
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  const int error = errno;
  if (error == ENOENT) {
    std::fprintf(stderr, "softverbs: %s: command not found (not a file, and not on PATH)\n",
                 argv[0]);
    return kExitNotFound;
  }
  std::fprintf(stderr, "softverbs: cannot run %s: %s\n", argv[0], std::strerror(error));
  return kExitCannotExecute;
}

}  // namespace

int run_command(std::span<char* const> args) {
  std::size_t program_at = args.size();
  bool saw_separator = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--") {
      saw_separator = true;
      program_at = i + 1;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      print_run_usage(stdout);
      return kExitSuccess;
    }
    std::string problem;
    switch (take_devices_option(args, i, problem)) {
      case OptionMatch::kTaken:
        continue;
      case OptionMatch::kMalformed:
        return usage_error(problem, kRunHint);
      case OptionMatch::kNotThisOption:
        break;
    }
    if (arg.starts_with("-"))
      return usage_error("run: unknown option '" + std::string(arg) + "'", kRunHint);
    // The program came without the separator: say exactly what to type.
    return usage_error("run: missing '--' before the program",
                       "type: softverbs run -- " + join_words(args.subspan(i)));
  }
  if (!saw_separator)
    return usage_error("run: missing '--' and the program to run",
                       "type: softverbs run -- PROGRAM [ARGS...], e.g. softverbs run -- ibv_devices");
  if (program_at >= args.size())
    return usage_error("run: no program after '--'",
                       "type: softverbs run -- PROGRAM [ARGS...], e.g. softverbs run -- ibv_devices");

  if (std::string problem = check_device_configuration(); !problem.empty()) {
    std::fprintf(stderr, "softverbs: %s\n", problem.c_str());
    return kExitUsage;
  }

  const LibraryLookup library = find_provider_library();
  if (library.path.empty()) {
    std::fprintf(stderr, "softverbs: %s\n", describe_missing_library(library).c_str());
    return kExitFailure;
  }
  std::vector<std::string> preloads = runtime_preloads();
  preloads.push_back(library.path);
  for (const std::string& path : preloads) {
    if (!is_preloadable_path(path)) {
      std::fprintf(stderr,
                   "softverbs: %s contains ':' or a space, which LD_PRELOAD cannot carry; "
                   "move it or set SOFTVERBS_LIBRARY to a copy elsewhere\n",
                   path.c_str());
      return kExitFailure;
    }
  }
  add_ibverbs_shim(library.path, preloads);
  const std::string ld_preload = compose_ld_preload(preloads, std::getenv("LD_PRELOAD"));
  ::setenv("LD_PRELOAD", ld_preload.c_str(), /*overwrite=*/1);
  return exec_program(args.subspan(program_at));
}

}  // namespace softverbs::cli
