// The options become the SOFTVERBS_CAPTURE* variables that the library
// reads in each process of the program; the rest is `softverbs run`.
#include "harness/cli/capture_command.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "harness/cli/exit_codes.h"
#include "harness/cli/run_command.h"
#include "harness/cli/usage.h"

namespace softverbs::cli {
namespace {

constexpr std::string_view kHint =
    "type: softverbs capture -o FILE.pcapng [--device NAME] [--qp N]... [--limit-mb N] -- "
    "PROGRAM [ARGS...]";

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

}  // namespace

int capture_command(std::span<char* const> args) {
  std::string output, device, limit;
  std::vector<std::string> qps;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--") break;
    if (arg == "-h" || arg == "--help") {
      print_capture_usage(stdout);
      return kExitSuccess;
    }
    const bool takes_value = arg == "-o" || arg == "--device" || arg == "--qp" || arg == "--limit-mb";
    if (!takes_value) return usage_error("capture: unknown option '" + std::string(arg) + "'", kHint);
    if (i + 1 >= args.size()) return usage_error("capture: " + std::string(arg) + " needs a value", kHint);
    const std::string value = args[++i];
    if (arg == "-o") output = value;
    if (arg == "--device") device = value;
    if (arg == "--limit-mb") limit = value;
    if (arg == "--qp") {
      if (!is_qpn(value))
        return usage_error("capture: --qp '" + value + "' is not a QP number (24 bits, e.g. 0x12)", kHint);
      qps.push_back(value);
    }
  }
  if (output.empty()) return usage_error("capture: say where to write with -o FILE.pcapng", kHint);
  if (i >= args.size()) return usage_error("capture: no program given (put it after --)", kHint);

  const std::string path = absolute(output);
  // The program's first process makes the file afresh.
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    std::fprintf(stderr, "softverbs: capture: cannot replace %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return kExitFailure;
  }
  std::string qp_list;
  for (const std::string& qp : qps) qp_list += (qp_list.empty() ? "" : ",") + qp;
  setenv("SOFTVERBS_CAPTURE", path.c_str(), 1);
  if (!qp_list.empty()) setenv("SOFTVERBS_CAPTURE_QP", qp_list.c_str(), 1);
  if (!device.empty()) setenv("SOFTVERBS_CAPTURE_DEVICE", device.c_str(), 1);
  if (!limit.empty()) setenv("SOFTVERBS_CAPTURE_LIMIT_MB", limit.c_str(), 1);
  return run_command(args.subspan(i));
}

}  // namespace softverbs::cli
