// `softverbs devices [--devices N]`: the soft devices as a table.
#pragma once

#include <span>

namespace softverbs::cli {

// `args` are the words after "devices". Returns the exit status.
int devices_command(std::span<char* const> args);

}  // namespace softverbs::cli
