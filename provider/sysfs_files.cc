#include "provider/sysfs_files.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "emulator/attributes.h"
#include "emulator/objects/hca.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

std::string format(const char* fmt, auto... args) {
  char text[128];
  std::snprintf(text, sizeof(text), fmt, args...);
  return text;
}

std::string sysfs_gid(const Gid& gid) {
  std::string text;
  for (size_t i = 0; i < gid.size(); i += 2) {
    if (i) text += ':';
    text += format("%02x%02x", gid[i], gid[i + 1]);
  }
  return text;
}

// Lanes of an IBTA active_width code.
int lanes(uint8_t width) {
  switch (width) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

struct LaneSpeed {
  double gbps;
  const char* name;
};

// Per-lane rate of an IBTA active_speed code.
LaneSpeed lane_speed(uint8_t speed) {
  switch (speed) {
    case 1: return {2.5, "SDR"};
    case 2: return {5.0, "DDR"};
    case 4: return {10.0, "QDR"};
    case 8: return {10.0, "FDR10"};
    case 16: return {14.0, "FDR"};
    case 32: return {25.0, "EDR"};
    case 64: return {50.0, "HDR"};
    case 128: return {100.0, "NDR"};
    default: return {0.0, "?"};
  }
}

const char* port_state_name(PortState state) {
  switch (state) {
    case PortState::kNop: return "0: NOP";
    case PortState::kDown: return "1: DOWN";
    case PortState::kInit: return "2: INIT";
    case PortState::kArmed: return "3: ARMED";
    case PortState::kActive: return "4: ACTIVE";
    case PortState::kActiveDefer: return "5: ACTIVE_DEFER";
  }
  return "0: NOP";
}

const char* phys_state_name(uint8_t phys_state) {
  switch (phys_state) {
    case 1: return "1: Sleep";
    case 2: return "2: Polling";
    case 3: return "3: Disabled";
    case 4: return "4: PortConfigurationTraining";
    case 5: return "5: LinkUp";
    case 6: return "6: LinkErrorRecovery";
    case 7: return "7: Phy Test";
    default: return "0: <unknown>";
  }
}

// "ports/1/gids/3" -> true with index 3 when `file` is `prefix` + a number.
bool indexed(std::string_view file, std::string_view prefix, uint32_t& index) {
  if (file.substr(0, prefix.size()) != prefix) return false;
  std::string_view digits = file.substr(prefix.size());
  if (digits.empty() || digits.size() > 9) return false;
  uint32_t value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint32_t>(c - '0');
  }
  index = value;
  return true;
}

Errno port_file(const DeviceDescription& device, uint8_t port_num, std::string_view file,
                std::string& content) {
  // What a freshly opened soft port reports; run-time changes (a port taken
  // down by fault injection) show in ibv_query_port, not here.
  const PortAttributes port = port_attributes_of(device, port_num);
  const std::vector<GidEntry>& gids = device.gids_of(port_num);
  ibv_port_attr attr;
  to_ibv_port_attr(port, attr);
  const bool ethernet = device.link_layer == LinkLayer::kEthernet;

  uint32_t index = 0;
  if (file == "state") {
    content = port_state_name(port.state);
  } else if (file == "phys_state") {
    content = phys_state_name(port.phys_state);
  } else if (file == "lid") {
    content = format("0x%x", port.lid);
  } else if (file == "lid_mask_count") {
    content = format("%u", port.lmc);
  } else if (file == "sm_lid") {
    content = format("0x%x", port.sm_lid);
  } else if (file == "sm_sl") {
    content = format("%u", port.sm_sl);
  } else if (file == "cap_mask") {
    content = format("0x%08x", attr.port_cap_flags);
  } else if (file == "link_layer") {
    content = ethernet ? "Ethernet" : "InfiniBand";
  } else if (file == "rate") {
    const int width = lanes(port.active_width);
    const LaneSpeed speed = lane_speed(port.active_speed);
    content = format("%g Gb/sec (%dX %s)", width * speed.gbps, width, speed.name);
  } else if (indexed(file, "gids/", index)) {
    if (index >= port.gid_tbl_len) return ENOENT;
    content = sysfs_gid(index < gids.size() ? gids[index].gid : Gid{});
  } else if (indexed(file, "pkeys/", index)) {
    if (index >= port.pkey_tbl_len) return ENOENT;
    content = format("0x%04x", kDefaultPkey);
  } else if (indexed(file, "gid_attrs/types/", index)) {
    if (index >= port.gid_tbl_len) return ENOENT;
    // The kernel has no GID types on InfiniBand: reading fails with EINVAL.
    if (!ethernet) return EINVAL;
    content = "RoCE v2";
  } else if (indexed(file, "gid_attrs/ndevs/", index)) {
    if (index >= port.gid_tbl_len) return ENOENT;
    // The kernel answers EINVAL for an entry without a net device.
    if (!ethernet || index >= gids.size()) return EINVAL;
    content = gids[index].netdev;
  } else {
    return ENOENT;
  }
  content += '\n';
  return 0;
}

}  // namespace

std::string uverbs_name(const DeviceDescription& device) { return "uverbs_" + device.name; }

std::string sysfs_guid(uint64_t guid) {
  return format("%04x:%04x:%04x:%04x", static_cast<unsigned>(guid >> 48) & 0xffff,
                static_cast<unsigned>(guid >> 32) & 0xffff,
                static_cast<unsigned>(guid >> 16) & 0xffff,
                static_cast<unsigned>(guid) & 0xffff);
}

Errno ibdev_sysfs_file(const DeviceDescription& device, std::string_view file,
                       std::string& content) {
  if (file == "node_type") {
    content = "1: CA\n";
  } else if (file == "node_guid" || file == "sys_image_guid") {
    content = sysfs_guid(device.node_guid) + "\n";
  } else if (file == "node_desc") {
    content = device.name + "\n";
  } else if (file == "board_id" || file == "hca_type") {
    content = "softverbs\n";
  } else if (file == "fw_ver") {
    content = device_attributes_of(device).fw_ver + "\n";
  } else if (file.size() > 8 && file.substr(0, 6) == "ports/" && file[7] == '/' &&
             device.has_port(static_cast<uint8_t>(file[6] - '0'))) {
    return port_file(device, static_cast<uint8_t>(file[6] - '0'), file.substr(8), content);
  } else {
    return ENOENT;
  }
  return 0;
}

std::vector<std::string> ibdev_sysfs_file_names(const DeviceDescription& device) {
  std::vector<std::string> names = {"node_type", "node_guid", "sys_image_guid",
                                    "node_desc", "board_id",  "hca_type", "fw_ver"};
  for (uint8_t p = 1; p <= device.port_count(); ++p) {
    const std::string dir = "ports/" + std::to_string(p) + "/";
    for (const char* file : {"state", "phys_state", "lid", "lid_mask_count", "sm_lid", "sm_sl",
                             "cap_mask", "link_layer", "rate"})
      names.push_back(dir + file);
    const PortAttributes port;
    for (uint32_t i = 0; i < port.gid_tbl_len; ++i) {
      names.push_back(dir + "gids/" + std::to_string(i));
      names.push_back(dir + "gid_attrs/types/" + std::to_string(i));
      names.push_back(dir + "gid_attrs/ndevs/" + std::to_string(i));
    }
    for (uint32_t i = 0; i < port.pkey_tbl_len; ++i)
      names.push_back(dir + "pkeys/" + std::to_string(i));
  }
  std::erase_if(names, [&](const std::string& name) {
    std::string content;
    return ibdev_sysfs_file(device, name, content) != 0;
  });
  return names;
}

Errno uverbs_sysfs_file(const DeviceDescription& device, std::string_view file,
                        std::string& content) {
  if (file == "ibdev") {
    content = device.name + "\n";
  } else if (file == "abi_version") {
    content = "1\n";
  } else {
    return ENOENT;
  }
  return 0;
}

int copy_sysfs_content(const std::string& content, char* buf, size_t size) {
  // As a read() of `size` bytes of the file would leave it.
  size_t length = std::min(size, content.size());
  std::memcpy(buf, content.data(), length);
  if (length == 0) return 0;
  if (buf[length - 1] == '\n') {
    buf[--length] = '\0';
  } else if (length < size) {
    buf[length] = '\0';
  } else {
    return -1;  // would have to be truncated to be terminated
  }
  return static_cast<int>(length);
}

}  // namespace softverbs::provider
