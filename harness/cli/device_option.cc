#include "harness/cli/device_option.h"

#include <cstdlib>
#include <string_view>

#include "emulator/host/device_config.h"

namespace softverbs::cli {

OptionMatch take_devices_option(std::span<char* const> args, std::size_t& i, std::string& problem) {
  constexpr std::string_view kName = "--devices";
  const std::string_view arg = args[i];
  std::string_view value;
  if (arg == kName) {
    if (i + 1 >= args.size()) {
      problem = "--devices needs a number, e.g. --devices 2";
      return OptionMatch::kMalformed;
    }
    value = args[++i];
  } else if (arg.starts_with(kName) && arg.size() > kName.size() && arg[kName.size()] == '=') {
    value = arg.substr(kName.size() + 1);
  } else {
    return OptionMatch::kNotThisOption;
  }
  if (value.empty()) {
    problem = "--devices needs a number, e.g. --devices 2";
    return OptionMatch::kMalformed;
  }
  ::setenv("SOFTVERBS_DEVICES", std::string(value).c_str(), /*overwrite=*/1);
  return OptionMatch::kTaken;
}

std::string check_device_configuration() {
  std::string error;
  configured_devices(&error);
  return error;
}

}  // namespace softverbs::cli
