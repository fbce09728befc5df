// The softverbs command: one word picks the subcommand, the rest is its own.
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include "harness/cli/control_command.h"
#include "harness/cli/devices_command.h"
#include "harness/cli/exit_codes.h"
#include "harness/cli/listeners_command.h"
#include "harness/cli/capture_command.h"
#include "harness/cli/reset_command.h"
#include "harness/cli/topo_command.h"
#include "harness/cli/run_command.h"
#include "harness/cli/usage.h"

namespace softverbs::cli {
namespace {

int help_command(std::span<char* const> args) {
  if (args.empty()) {
    print_usage(stdout);
    return kExitSuccess;
  }
  const std::string_view topic = args[0];
  if (topic == "run") {
    print_run_usage(stdout);
  } else if (topic == "devices") {
    print_devices_usage(stdout);
  } else if (topic == "listeners") {
    print_listeners_usage(stdout);
  } else if (topic == "reset") {
    print_reset_usage(stdout);
  } else if (topic == "topo") {
    print_topo_usage(stdout);
  } else if (topic == "capture") {
    print_capture_usage(stdout);
  } else if (topic == "stats" || topic == "fault" || topic == "port" || topic == "rnr") {
    print_control_usage(stdout);
  } else {
    return usage_error("help: no command named '" + std::string(topic) + "'",
                       "type: softverbs help [run|devices|listeners|stats|fault|port|rnr|reset|topo|capture]");
  }
  return kExitSuccess;
}

int dispatch(std::span<char* const> words) {
  if (words.empty()) return usage_error("no command given");
  const std::string_view command = words[0];
  const auto rest = words.subspan(1);
  if (command == "run") return run_command(rest);
  if (command == "devices") return devices_command(rest);
  if (command == "listeners") return listeners_command(rest);
  if (command == "stats") return stats_command(rest);
  if (command == "fault") return fault_command(rest);
  if (command == "port") return port_command(rest);
  if (command == "rnr") return rnr_command(rest);
  if (command == "reset") return reset_command(rest);
  if (command == "topo") return topo_command(rest);
  if (command == "capture") return capture_command(rest);
  if (command == "help" || command == "--help" || command == "-h") return help_command(rest);
  return usage_error("unknown command '" + std::string(command) + "'");
}

}  // namespace
}  // namespace softverbs::cli

int main(int argc, char** argv) {
  return softverbs::cli::dispatch(std::span<char* const>(argv + 1, argc > 0 ? argc - 1 : 0));
}
