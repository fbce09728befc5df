// `softverbs listeners`: the connection manager's listening ports of the
// running programs (as `ss -l` shows a host's TCP listeners).
#pragma once

#include <span>

namespace softverbs::cli {

// `args` are the words after "listeners". Returns the exit status.
int listeners_command(std::span<char* const> args);

}  // namespace softverbs::cli
