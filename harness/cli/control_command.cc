#include "harness/cli/control_command.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/control/control_socket.h"
#include "harness/cli/exit_codes.h"
#include "harness/cli/usage.h"

namespace softverbs::cli {
namespace {

struct Target {
  std::vector<pid_t> pids;  // explicit --pid, or every process when empty
};

// Takes "--pid N" (repeatable) off the front of args.
bool parse_pids(std::span<char* const>& args, Target& target, std::string_view command,
                int& exit_code) {
  while (!args.empty() && std::string_view(args[0]) == "--pid") {
    if (args.size() < 2) {
      exit_code = usage_error(std::string(command) + ": --pid needs a process id",
                              "e.g. softverbs " + std::string(command) + " --pid 1234 ...");
      return false;
    }
    char* end = nullptr;
    long pid = std::strtol(args[1], &end, 10);
    if (*end || pid <= 0) {
      exit_code = usage_error(std::string(command) + ": '" + args[1] + "' is not a process id");
      return false;
    }
    target.pids.push_back(static_cast<pid_t>(pid));
    args = args.subspan(2);
  }
  return true;
}

// Sends `request` to each target process; prints replies. A command that
// changes state needs to know which process when several run.
int send_to(Target target, const std::string& request, bool changes_state,
            std::string_view command) {
  if (target.pids.empty()) {
    target.pids = control::list_processes();
    if (target.pids.empty()) {
      std::fprintf(stderr,
                   "softverbs %.*s: no running program uses softverbs as this user "
                   "(start one with `softverbs run -- PROGRAM`; check SOFTVERBS_SHM_PREFIX)\n",
                   static_cast<int>(command.size()), command.data());
      return kExitFailure;
    }
    if (changes_state && target.pids.size() > 1) {
      std::string list;
      for (pid_t p : target.pids) list += " " + std::to_string(p);
      return usage_error(std::string(command) + ": several programs run (pids" + list +
                             "); say which with --pid",
                         "e.g. softverbs " + std::string(command) + " --pid " +
                             std::to_string(target.pids.front()) + " ...");
    }
  }
  int status = kExitSuccess;
  for (pid_t pid : target.pids) {
    std::string reply, error;
    if (!control::request(pid, request, reply, error)) {
      std::fprintf(stderr, "softverbs %.*s: %s\n", static_cast<int>(command.size()),
                   command.data(), error.c_str());
      status = kExitFailure;
      continue;
    }
    if (target.pids.size() > 1 && changes_state) std::printf("process %d: ", pid);
    std::fputs(reply.c_str(), reply.rfind("error:", 0) == 0 ? stderr : stdout);
    if (reply.rfind("error:", 0) == 0) status = kExitFailure;
  }
  return status;
}

std::string join(std::span<char* const> words) {
  std::string out;
  for (char* w : words) {
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

}  // namespace

int stats_command(std::span<char* const> args) {
  Target target;
  int code = 0;
  if (!parse_pids(args, target, "stats", code)) return code;
  if (!args.empty()) return usage_error(std::string("stats: unexpected '") + args[0] + "'",
                                        "usage: softverbs stats [--pid PID]...");
  return send_to(target, "stats", false, "stats");
}

int fault_command(std::span<char* const> args) {
  Target target;
  int code = 0;
  if (!parse_pids(args, target, "fault", code)) return code;
  const std::string hint =
      "usage: softverbs fault [--pid PID] show | clear | set 'PLAN' | set --file FILE\n"
      "e.g.   softverbs fault --pid 1234 set 'seed=7; drop:p=0.01'  (see docs/faults.md)";
  if (args.empty()) return send_to(target, "fault show", false, "fault");
  const std::string_view verb = args[0];
  if (verb == "show") return send_to(target, "fault show", false, "fault");
  if (verb == "clear") return send_to(target, "fault clear", true, "fault");
  if (verb != "set") return usage_error("fault: unknown request '" + std::string(verb) + "'", hint);
  std::string plan;
  if (args.size() == 3 && std::string_view(args[1]) == "--file") {
    std::ifstream in(args[2]);
    if (!in) return usage_error(std::string("fault: cannot read ") + args[2], hint);
    // One request line: each line's rules, comments cut off, joined by ';'.
    std::string line;
    while (std::getline(in, line)) {
      line = line.substr(0, line.find('#'));
      if (line.find_first_not_of(" \t\r;") == std::string::npos) continue;
      if (!plan.empty()) plan += ';';
      plan += line;
    }
  } else {
    plan = join(args.subspan(1));
  }
  if (plan.empty()) return usage_error("fault set: no plan given", hint);
  return send_to(target, "fault set " + plan, true, "fault");
}

int port_command(std::span<char* const> args) {
  Target target;
  int code = 0;
  if (!parse_pids(args, target, "port", code)) return code;
  const std::string_view state = args.empty() ? "" : std::string_view(args.back());
  if ((args.size() != 2 && args.size() != 3) || (state != "up" && state != "down"))
    return usage_error("port: say which device, optionally which port, and up or down",
                       "usage: softverbs port [--pid PID] DEVICE [PORT] up|down  "
                       "(e.g. softverbs port --pid 1234 softverbs0 2 down; PORT defaults to 1)");
  return send_to(target, "port " + join(args), true, "port");
}

int rnr_command(std::span<char* const> args) {
  Target target;
  int code = 0;
  if (!parse_pids(args, target, "rnr", code)) return code;
  if (args.size() != 1)
    return usage_error("rnr: say off, all or a QPN",
                       "usage: softverbs rnr [--pid PID] off|all|QPN  (e.g. softverbs rnr "
                       "--pid 1234 0x12)");
  return send_to(target, std::string("rnr ") + args[0], true, "rnr");
}

}  // namespace softverbs::cli
