// The softverbs command: one word picks the subcommand, the rest is its own.
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "harness/cli/capture_command.h"
#include "harness/cli/control_command.h"
#include "harness/cli/devices_command.h"
#include "harness/cli/exit_codes.h"
#include "harness/cli/listeners_command.h"
#include "harness/cli/reset_command.h"
#include "harness/cli/run_command.h"
#include "harness/cli/topo_command.h"
#include "harness/cli/trace_command.h"
#include "harness/cli/usage.h"

namespace softverbs::cli {
namespace {

struct Command {
  std::string_view name;
  int (*run)(std::span<char* const> args);
  void (*print_usage)(std::FILE* out);
};

constexpr Command kCommands[] = {
    {"run", run_command, print_run_usage},
    {"devices", devices_command, print_devices_usage},
    {"listeners", listeners_command, print_listeners_usage},
    {"stats", stats_command, print_control_usage},
    {"fault", fault_command, print_control_usage},
    {"port", port_command, print_control_usage},
    {"rnr", rnr_command, print_control_usage},
    {"reset", reset_command, print_reset_usage},
    {"topo", topo_command, print_topo_usage},
    {"capture", capture_command, print_capture_usage},
    {"trace", trace_command, print_trace_usage},
};

const Command* find_command(std::string_view name) {
  for (const Command& command : kCommands)
    if (command.name == name) return &command;
  return nullptr;
}

bool asks_for_help(std::string_view word) { return word == "--help" || word == "-h"; }

int help_command(std::span<char* const> args) {
  if (args.empty()) {
    print_usage(stdout);
    return kExitSuccess;
  }
  const Command* command = find_command(args[0]);
  if (!command)
    return usage_error("help: no command named '" + std::string(args[0]) + "'",
                       "type: softverbs help [run|devices|listeners|stats|fault|port|rnr|reset|topo|capture|trace]");
  command->print_usage(stdout);
  return kExitSuccess;
}

int dispatch(std::span<char* const> words) {
  if (words.empty()) return usage_error("no command given");
  const std::string_view word = words[0];
  const auto rest = words.subspan(1);
  if (word == "help" || asks_for_help(word)) return help_command(rest);
  if (word == "--version" || word == "version") {
    std::printf("softverbs %s\n", SOFTVERBS_VERSION);
    return kExitSuccess;
  }
  const Command* command = find_command(word);
  if (!command) return usage_error("unknown command '" + std::string(word) + "'");
  // `softverbs COMMAND --help` is a request, not misuse, whatever the
  // command's own parser makes of the word.
  if (!rest.empty() && asks_for_help(rest[0])) {
    command->print_usage(stdout);
    return kExitSuccess;
  }
  return command->run(rest);
}

}  // namespace
}  // namespace softverbs::cli

int main(int argc, char** argv) {
  return softverbs::cli::dispatch(std::span<char* const>(argv + 1, argc > 0 ? argc - 1 : 0));
}
