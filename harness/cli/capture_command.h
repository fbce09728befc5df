// `softverbs capture -o FILE [--device D] [--qp N]... [--limit-mb N] -- PROGRAM`:
// runs PROGRAM as `softverbs run` does, with every packet its soft devices
// send and receive written to FILE (pcapng; emulator/capture/).
#pragma once

#include <span>

namespace softverbs::cli {

// `args` are the words after "capture". Returns only on failure (an exit
// status); on success the process becomes PROGRAM.
int capture_command(std::span<char* const> args);

}  // namespace softverbs::cli
