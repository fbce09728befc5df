// With a program, the options become the SOFTVERBS_CAPTURE* variables that
// the library reads in each process of the program; the rest is `softverbs
// run`. With --pid, they become a `capture start` request to that process's
// control socket, and `capture stop` ends it.
#include "harness/cli/capture_command.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/control/control_socket.h"
#include "harness/cli/exit_codes.h"
#include "harness/cli/run_command.h"
#include "harness/cli/usage.h"

namespace softverbs::cli {
namespace {

constexpr std::string_view kHint =
    "type: softverbs capture -o FILE.pcapng [--device NAME] [--qp N]... [--limit-mb N] -- "
    "PROGRAM [ARGS...]\n"
    "  or: softverbs capture --pid PID -o FILE.pcapng [--seconds S] [--device NAME] [--qp N]...";

struct Options {
  std::string output, device, limit, pid, seconds;
  std::vector<std::string> qps;
};

volatile sig_atomic_t g_interrupted = 0;
void note_interrupt(int) { g_interrupted = 1; }

// The file's absolute path, so that a program that changes directory still
// writes it where the user asked.
std::string absolute(const std::string& path) {
  if (!path.empty() && path.front() == '/') return path;
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) return path;
  return std::string(cwd) + "/" + path;
}

bool is_qpn(std::string_view text) {
  if (text.empty()) return false;
  char* end = nullptr;
  const std::string copy(text);
  const unsigned long value = std::strtoul(copy.c_str(), &end, 0);
  return *end == '\0' && value <= 0xffffff;
}

bool is_count(std::string_view text) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  return std::stoul(std::string(text)) > 0;
}

// Replaces FILE, which the capture then makes afresh.
bool remove_old(const std::string& path) {
  if (unlink(path.c_str()) == 0 || errno == ENOENT) return true;
  std::fprintf(stderr, "softverbs: capture: cannot replace %s: %s\n", path.c_str(),
               std::strerror(errno));
  return false;
}

// A request to the running process; false (said on stderr) when it fails.
bool ask(pid_t pid, const std::string& request, std::string& reply) {
  std::string error;
  if (!control::request(pid, request, reply, error)) {
    std::fprintf(stderr, "softverbs: capture: %s\n", error.c_str());
    return false;
  }
  if (reply.rfind("error:", 0) == 0) {
    std::fprintf(stderr, "softverbs: capture: process %d: %s", pid, reply.c_str() + 7);
    return false;
  }
  return true;
}

// Waits for Ctrl-C (SIGINT or SIGTERM) or `seconds` (0: no limit); false
// when process `pid` ends first.
bool wait_for_stop(pid_t pid, long seconds) {
  timespec start{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  while (!g_interrupted) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (seconds && now.tv_sec - start.tv_sec >= seconds) return true;
    timespec tick{0, 100'000'000};
    nanosleep(&tick, nullptr);
  }
  return true;
}

// Captures process `pid` until Ctrl-C (SIGINT or SIGTERM), --seconds, or
// the process's end.
int capture_running_process(const Options& o, const std::string& path) {
  char* end = nullptr;
  const long pid = std::strtol(o.pid.c_str(), &end, 10);
  if (*end || pid <= 0)
    return usage_error("capture: --pid '" + o.pid + "' is not a process id", kHint);
  if (!remove_old(path)) return kExitFailure;
  std::string request = "capture start";
  if (!o.qps.empty()) {
    request += " qp=";
    for (size_t i = 0; i < o.qps.size(); ++i) request += (i ? "," : "") + o.qps[i];
  }
  if (!o.device.empty()) request += " device=" + o.device;
  if (!o.limit.empty()) request += " limit-mb=" + o.limit;
  request += " " + path;

  struct sigaction action {};
  action.sa_handler = note_interrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::string reply;
  if (!ask(static_cast<pid_t>(pid), request, reply)) return kExitFailure;
  std::fputs(reply.c_str(), stdout);
  std::fflush(stdout);

  if (!wait_for_stop(static_cast<pid_t>(pid), o.seconds.empty() ? 0 : std::stol(o.seconds))) {
    std::printf("process %ld ended; %s holds what it sent and received until then\n", pid,
                path.c_str());
    return kExitSuccess;
  }
  if (!ask(static_cast<pid_t>(pid), "capture stop", reply)) return kExitFailure;
  std::fputs(reply.c_str(), stdout);
  return kExitSuccess;
}

// Reads the options before "--" into `o`; `program_at` is where the
// program starts (args.size() when none is given). An exit status when an
// option is wrong (or -h), else -1.
int parse_options(std::span<char* const> args, Options& o, size_t& program_at) {
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--") break;
    if (arg == "-h" || arg == "--help") {
      print_capture_usage(stdout);
      return kExitSuccess;
    }
    const bool takes_value = arg == "-o" || arg == "--device" || arg == "--qp" ||
                             arg == "--limit-mb" || arg == "--pid" || arg == "--seconds";
    const std::string option(arg);
    if (!takes_value) return usage_error("capture: unknown option '" + option + "'", kHint);
    if (i + 1 >= args.size()) return usage_error("capture: " + option + " needs a value", kHint);
    const std::string value = args[++i];
    if (arg == "-o") o.output = value;
    if (arg == "--device") o.device = value;
    if (arg == "--pid") o.pid = value;
    if (arg == "--limit-mb") {
      if (!is_count(value))
        return usage_error("capture: --limit-mb '" + value + "' is not a size in MiB", kHint);
      o.limit = value;
    }
    if (arg == "--seconds") {
      if (!is_count(value))
        return usage_error("capture: --seconds '" + value + "' is not a number of seconds", kHint);
      o.seconds = value;
    }
    if (arg == "--qp") {
      if (!is_qpn(value))
        return usage_error(
            "capture: --qp '" + value + "' is not a QP number (24 bits, e.g. 0x12)", kHint);
      o.qps.push_back(value);
    }
  }
  program_at = i;
  return -1;
}

}  // namespace

int capture_command(std::span<char* const> args) {
  Options o;
  size_t i = 0;
  if (int status = parse_options(args, o, i); status >= 0) return status;
  if (o.output.empty())
    return usage_error("capture: say where to write with -o FILE.pcapng", kHint);
  const std::string path = absolute(o.output);
  if (!o.pid.empty()) {
    if (i < args.size())
      return usage_error("capture: give either --pid or a program after --, not both", kHint);
    return capture_running_process(o, path);
  }
  if (!o.seconds.empty())
    return usage_error("capture: --seconds is for --pid; a program's capture ends with it", kHint);
  if (i >= args.size())
    return usage_error("capture: no program given (put it after --), or say --pid PID", kHint);

  // The program's first process makes the file afresh.
  if (!remove_old(path)) return kExitFailure;
  std::string qp_list;
  for (const std::string& qp : o.qps) qp_list += (qp_list.empty() ? "" : ",") + qp;
  setenv("SOFTVERBS_CAPTURE", path.c_str(), 1);
  if (!qp_list.empty()) setenv("SOFTVERBS_CAPTURE_QP", qp_list.c_str(), 1);
  if (!o.device.empty()) setenv("SOFTVERBS_CAPTURE_DEVICE", o.device.c_str(), 1);
  if (!o.limit.empty()) setenv("SOFTVERBS_CAPTURE_LIMIT_MB", o.limit.c_str(), 1);
  return run_command(args.subspan(i));
}

}  // namespace softverbs::cli
