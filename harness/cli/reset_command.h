// `softverbs reset`: removes this user's shared registry and mailboxes, the
// way out when the registry is from another softverbs version or damaged.
#pragma once

#include <span>

namespace softverbs::cli {

// `args` are the words after "reset". Returns the exit status.
int reset_command(std::span<char* const> args);

}  // namespace softverbs::cli
