// `softverbs stats|fault|port|rnr`: requests to running programs' control
// sockets (emulator/control/control_commands.h says what each does).
#pragma once

#include <span>

namespace softverbs::cli {

int stats_command(std::span<char* const> args);
int fault_command(std::span<char* const> args);
int port_command(std::span<char* const> args);
int rnr_command(std::span<char* const> args);

}  // namespace softverbs::cli
