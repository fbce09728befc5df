// `softverbs capture -o FILE [--device D] [--qp N]... [--limit-mb N] -- PROGRAM`:
// runs PROGRAM as `softverbs run` does, with every packet its soft devices
// send and receive written to FILE (pcapng; emulator/capture/).
// `softverbs capture --pid PID -o FILE [--seconds S] ...`: the same for a
// process already running, until Ctrl-C, S seconds or the process's end.
#pragma once

#include <span>

namespace softverbs::cli {

// `args` are the words after "capture". With a program, returns only on
// failure (an exit status); on success the process becomes PROGRAM.
int capture_command(std::span<char* const> args);

}  // namespace softverbs::cli
