// `softverbs run [--devices N] -- PROGRAM [ARGS...]`
#pragma once

#include <span>

namespace softverbs::cli {

// `args` are the words after "run". Returns only on failure (an exit
// status); on success the process becomes PROGRAM.
int run_command(std::span<char* const> args);

}  // namespace softverbs::cli
