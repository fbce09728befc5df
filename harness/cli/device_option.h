// The `--devices N` option that `run` and `devices` share: it stands for
// SOFTVERBS_DEVICES, so the CLI and the programs it starts agree on the
// device list.
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace softverbs::cli {

enum class OptionMatch {
  kNotThisOption,  // args[i] is something else; nothing consumed
  kTaken,          // consumed (i now points at the option's last word)
  kMalformed,      // it is --devices but its value is missing; see `problem`
};

// Looks at args[i]: "--devices N" or "--devices=N". On kTaken, exports
// SOFTVERBS_DEVICES=N for this process and whatever it starts; the value is
// checked by check_device_configuration(), with the same rules the devices
// themselves use.
OptionMatch take_devices_option(std::span<char* const> args, std::size_t& i, std::string& problem);

// Reads SOFTVERBS_DEVICES / SOFTVERBS_LINK_LAYER the way the soft devices do.
// Returns an empty string when they are valid, else the reason.
std::string check_device_configuration();

}  // namespace softverbs::cli
