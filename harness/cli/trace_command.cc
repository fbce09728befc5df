// `softverbs trace diff A B` (trace_command.h).
#include "harness/cli/trace_command.h"

#include <cstdio>
#include <string>
#include <string_view>

#include "harness/cli/exit_codes.h"
#include "harness/cli/trace_diff.h"
#include "harness/cli/usage.h"

namespace softverbs::cli {
namespace {

constexpr std::string_view kTraceHint =
    "type: softverbs trace diff DIR_A DIR_B   (see softverbs help trace)";

constexpr int kExitDifferent = 1;

int trace_diff(const std::string& dir_a, const std::string& dir_b) {
  std::vector<TracedProcess> a, b;
  std::string error;
  if (!read_trace_directory(dir_a, a, error) || !read_trace_directory(dir_b, b, error)) {
    std::fprintf(stderr, "softverbs: trace diff: %s\n", error.c_str());
    return kExitUsage;
  }
  const TraceComparison comparison = compare_runs(a, b, stdout);
  if (comparison.same()) {
    std::printf("same path: %zu traces of %zu processes agree event for event\n",
                comparison.traces_compared, a.size());
    return kExitSuccess;
  }
  std::printf("different paths: %zu of %zu traces differ\n", comparison.traces_differing,
              comparison.traces_compared);
  return kExitDifferent;
}

}  // namespace

int trace_command(std::span<char* const> args) {
  if (args.empty()) return usage_error("trace: missing 'diff DIR_A DIR_B'", kTraceHint);
  const std::string_view action = args[0];
  if (action != "diff")
    return usage_error("trace: unknown action '" + std::string(action) + "'", kTraceHint);
  if (args.size() != 3)
    return usage_error("trace diff: needs exactly two trace directories", kTraceHint);
  return trace_diff(args[1], args[2]);
}

}  // namespace softverbs::cli
