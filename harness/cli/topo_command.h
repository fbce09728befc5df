// `softverbs topo`: hosts for the UDP wire on one machine. Each host is a
// network namespace with its own address and its own softverbs registry
// (SOFTVERBS_SHM_PREFIX), joined to the others by a bridge that lives in a
// namespace of its own, so nothing of the machine's own network changes.
#pragma once

#include <span>

namespace softverbs::cli {

// `args` are the words after "topo". Returns the exit status.
int topo_command(std::span<char* const> args);

}  // namespace softverbs::cli
