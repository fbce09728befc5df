#include "harness/cli/devices_command.h"

#include <cinttypes>
#include <cstdio>
#include <string>
#include <string_view>

#include "emulator/host/device_config.h"
#include "harness/cli/device_option.h"
#include "harness/cli/exit_codes.h"
#include "harness/cli/usage.h"

namespace softverbs::cli {
namespace {

constexpr std::string_view kDevicesHint = "type: softverbs devices [--devices N]";

// Four groups of four hex digits, as ibv_devinfo prints a node GUID.
std::string format_guid(uint64_t guid) {
  char text[20];
  std::snprintf(text, sizeof text, "%04x:%04x:%04x:%04x", static_cast<unsigned>(guid >> 48),
                static_cast<unsigned>(guid >> 32) & 0xffff, static_cast<unsigned>(guid >> 16) & 0xffff,
                static_cast<unsigned>(guid) & 0xffff);
  return text;
}

// Eight groups of four hex digits, as ibv_devinfo -v prints a GID.
std::string format_gid(const Gid& gid) {
  std::string text;
  char group[6];
  for (std::size_t i = 0; i < gid.size(); i += 2) {
    std::snprintf(group, sizeof group, "%s%02x%02x", i == 0 ? "" : ":", gid[i], gid[i + 1]);
    text += group;
  }
  return text;
}

const char* link_layer_name(LinkLayer link) {
  return link == LinkLayer::kInfiniBand ? "InfiniBand" : "Ethernet";
}

}  // namespace

int devices_command(std::span<char* const> args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "-h" || arg == "--help") {
      print_devices_usage(stdout);
      return kExitSuccess;
    }
    std::string problem;
    switch (take_devices_option(args, i, problem)) {
      case OptionMatch::kTaken:
        continue;
      case OptionMatch::kMalformed:
        return usage_error(problem, kDevicesHint);
      case OptionMatch::kNotThisOption:
        return usage_error("devices: unexpected argument '" + std::string(arg) + "'", kDevicesHint);
    }
  }

  std::string error;
  const auto devices = configured_devices(&error);
  if (!error.empty()) {
    std::fprintf(stderr, "softverbs: %s\n", error.c_str());
    return kExitUsage;
  }
  if (devices.empty()) {
    std::puts("no soft devices (SOFTVERBS_DEVICES=0)");
    return kExitSuccess;
  }
  std::printf("%-12s  %-19s  %-10s  %-6s  %s\n", "device", "node GUID", "link layer", "LID", "GID[0]");
  for (const DeviceDescription& device : devices) {
    // One line per port; a second port (SOFTVERBS_PORTS=2) as "NAME/2".
    for (uint8_t port = 1; port <= device.port_count(); ++port) {
      const auto& gids = device.gids_of(port);
      const std::string gid0 = gids.empty() ? "-" : format_gid(gids.front().gid);
      const std::string name = port == 1 ? device.name : device.name + "/" + std::to_string(port);
      char lid[8];
      std::snprintf(lid, sizeof lid, "0x%04x", device.lid_of(port));
      std::printf("%-12s  %-19s  %-10s  %-6s  %s\n", name.c_str(),
                  format_guid(device.node_guid).c_str(), link_layer_name(device.link_layer), lid,
                  gid0.c_str());
    }
  }
  return kExitSuccess;
}

}  // namespace softverbs::cli
