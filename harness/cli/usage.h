// The help texts of the CLI and the one way misuse is reported.
#pragma once

#include <cstdio>
#include <string_view>

namespace softverbs::cli {

void print_usage(std::FILE* out);
void print_run_usage(std::FILE* out);
void print_devices_usage(std::FILE* out);
void print_listeners_usage(std::FILE* out);
void print_reset_usage(std::FILE* out);
void print_topo_usage(std::FILE* out);
void print_capture_usage(std::FILE* out);
void print_trace_usage(std::FILE* out);
void print_control_usage(std::FILE* out);

// Prints "softverbs: <problem>", then what to type instead (`hint`, or the
// general usage when empty), and returns kExitUsage.
int usage_error(std::string_view problem, std::string_view hint = {});

}  // namespace softverbs::cli
