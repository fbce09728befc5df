#include "harness/cli/run_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "harness/cli/device_files.h"
#include "harness/cli/device_option.h"
#include "harness/cli/exit_codes.h"
#include "harness/cli/ibverbs_shim.h"
#include "harness/cli/provider_library.h"
#include "harness/cli/usage.h"
#include "emulator/fault/fault_plan.h"

namespace softverbs::cli {
namespace {

constexpr std::string_view kRunHint =
    "type: softverbs run [--devices N] [--[no-]device-files] [--seed N] [--trace DIR] -- PROGRAM "
    "[ARGS...]   "
    "(see softverbs help run)";

// --seed N: the run's fault seed, for every process of it
// (SOFTVERBS_FAULT_SEED). false + a message when N is not a number.
bool take_seed_option(std::span<char* const> args, std::size_t& i, std::string& problem) {
  if (std::string_view(args[i]) != "--seed") return false;
  uint64_t seed = 0;
  if (i + 1 >= args.size()) {
    problem = "run: --seed needs a number, e.g. --seed 7";
    return true;
  }
  if (!fault::parse_seed(args[i + 1], seed, problem)) {
    problem = "run: --seed: " + problem;
    return true;
  }
  ::setenv("SOFTVERBS_FAULT_SEED", args[++i], /*overwrite=*/1);
  return true;
}

// --trace DIR: every process of the run traces into DIR (SOFTVERBS_TRACE),
// named absolutely, since a program may change its directory. The
// directory is made here, so that a bad path is said before the program runs.
bool take_trace_option(std::span<char* const> args, std::size_t& i, std::string& problem) {
  if (std::string_view(args[i]) != "--trace") return false;
  if (i + 1 >= args.size() || std::string_view(args[i + 1]).empty()) {
    problem = "run: --trace needs a directory, e.g. --trace traces/run1";
    return true;
  }
  std::string directory = args[++i];
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error || !std::filesystem::is_directory(directory)) {
    problem = "run: --trace " + directory + ": cannot make the directory" +
              (error ? " (" + error.message() + ")" : std::string(", a file is there"));
    return true;
  }
  directory = std::filesystem::absolute(directory).lexically_normal().string();
  ::setenv("SOFTVERBS_TRACE", directory.c_str(), /*overwrite=*/1);
  return true;
}

// With a fault plan in force, says which seed the run uses and how to ask
// for it again.
void announce_fault_seed() {
  fault::Plan plan;
  std::string error;
  if (!fault::startup_plan(plan, error) || plan.rules.empty()) return;
  std::fprintf(stderr,
               "softverbs: fault plan seed %llu (replay with: softverbs run --seed %llu, or "
               "SOFTVERBS_FAULT_SEED=%llu)\n",
               static_cast<unsigned long long>(plan.seed),
               static_cast<unsigned long long>(plan.seed),
               static_cast<unsigned long long>(plan.seed));
}

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

// LD_PRELOAD for PROGRAM: libsoftverbs.so (behind a sanitizer runtime in
// such builds), the libibverbs.so.1 shim and the system library, then what
// was there. False (with the message printed) when that cannot be done.
bool set_ld_preload() {
  const LibraryLookup library = find_provider_library();
  if (library.path.empty()) {
    std::fprintf(stderr, "softverbs: %s\n", describe_missing_library(library).c_str());
    return false;
  }
  std::vector<std::string> preloads = runtime_preloads();
  preloads.push_back(library.path);
  for (const std::string& path : preloads) {
    if (!is_preloadable_path(path)) {
      std::fprintf(stderr,
                   "softverbs: %s contains ':' or a space, which LD_PRELOAD cannot carry; "
                   "move it or set SOFTVERBS_LIBRARY to a copy elsewhere\n",
                   path.c_str());
      return false;
    }
  }
  add_ibverbs_shim(library.path, preloads);
  const std::string ld_preload = compose_ld_preload(preloads, std::getenv("LD_PRELOAD"));
  ::setenv("LD_PRELOAD", ld_preload.c_str(), /*overwrite=*/1);
  return true;
}

// --device-files / --no-device-files, else SOFTVERBS_DEVICE_FILES (1, 0),
// else "auto": made where that needs no user namespace (CAP_SYS_ADMIN).
enum class DeviceFilesChoice { kAuto, kAlways, kNever };

DeviceFilesChoice device_files_choice(std::optional<bool> option) {
  if (option) return *option ? DeviceFilesChoice::kAlways : DeviceFilesChoice::kNever;
  const char* env = std::getenv("SOFTVERBS_DEVICE_FILES");
  if (env && std::string_view(env) == "1") return DeviceFilesChoice::kAlways;
  if (env && std::string_view(env) == "0") return DeviceFilesChoice::kNever;
  return DeviceFilesChoice::kAuto;
}

// The soft devices' files in PROGRAM's view of the file system
// (device_files.h). Where the kernel allows no namespace (a container's
// seccomp profile, disabled user namespaces) PROGRAM runs without them.
// Returns false when the process cannot run PROGRAM any more.
bool make_device_files_for_program(DeviceFilesChoice choice) {
  if (choice == DeviceFilesChoice::kNever) return true;
  const bool always = choice == DeviceFilesChoice::kAlways;
  std::string error;
  const DeviceFilesOutcome outcome = make_device_files(configured_devices(&error), always);
  if (outcome.made || outcome.problem.empty()) return true;
  if (outcome.broken) {
    std::fprintf(stderr,
                 "softverbs: cannot set up the soft devices' files (%s); "
                 "run with --no-device-files\n",
                 outcome.problem.c_str());
    return false;
  }
  if (always)
    std::fprintf(stderr,
                 "softverbs: note: no /sys/class/infiniband or /dev/infiniband files for the "
                 "soft devices (%s); verbs work, but tools that look there (ucx_info) skip "
                 "the devices\n",
                 outcome.problem.c_str());
  return true;
}

// `softverbs run -- env LD_PRELOAD=X PROGRAM` replaces the preload that
// brings softverbs: PROGRAM then sees no soft device (and rsocket, say,
// falls back to TCP without a word). Says how to append instead.
void warn_of_a_replaced_preload(std::span<char* const> program_and_args) {
  if (std::filesystem::path(program_and_args[0]).filename() != "env") return;
  for (const char* arg : program_and_args.subspan(1)) {
    const std::string_view word = arg;
    if (word.find('=') == std::string_view::npos) return;  // env's assignments come first
    if (word.starts_with("LD_PRELOAD=") && word.find("libsoftverbs") == std::string_view::npos) {
      std::fprintf(stderr,
                   "softverbs: note: 'env %.*s' replaces the LD_PRELOAD that brings softverbs, "
                   "so the program sees no soft device; append to it instead: "
                   "softverbs run -- sh -c 'LD_PRELOAD=\"$LD_PRELOAD:%.*s\" exec PROGRAM'\n",
                   static_cast<int>(word.size()), word.data(),
                   static_cast<int>(word.size() - 11), word.data() + 11);
      return;
    }
  }
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
  std::optional<bool> device_files;
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
    if (arg == "--device-files" || arg == "--no-device-files") {
      device_files = arg == "--device-files";
      continue;
    }
    std::string problem;
    if (take_seed_option(args, i, problem) || take_trace_option(args, i, problem)) {
      if (!problem.empty()) return usage_error(problem, kRunHint);
      continue;
    }
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

  announce_fault_seed();
  if (!set_ld_preload()) return kExitFailure;
  if (!make_device_files_for_program(device_files_choice(device_files))) return kExitFailure;
  warn_of_a_replaced_preload(args.subspan(program_at));
  return exec_program(args.subspan(program_at));
}

}  // namespace softverbs::cli
