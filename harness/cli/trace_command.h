// `softverbs trace diff A B`: whether two runs traced into directories A
// and B (softverbs run --trace DIR, SOFTVERBS_TRACE=DIR) took the same
// protocol path, and where they parted (trace_diff.h). Exit status as
// diff(1): 0 the same, 1 different, 2 trouble.
#pragma once

#include <span>

namespace softverbs::cli {

int trace_command(std::span<char* const> args);

}  // namespace softverbs::cli
