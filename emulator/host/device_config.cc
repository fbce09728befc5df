#include "emulator/host/device_config.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "emulator/attributes.h"

namespace softverbs {
namespace {

// A locally administered OUI-like prefix, so soft GUIDs never collide with a
// vendor's real ones.
constexpr uint64_t kGuidPrefix = 0x02'53'56'ff'fe'00'00'00ull;  // "SV"
// Addresses a device can own: more than a GID table holds, for hosts with
// many interfaces (the RoCE GID table keeps the first kGidTableLen).
constexpr size_t kMaxOwnedAddresses = 256;

Gid link_local_gid(uint64_t guid) {
  Gid gid{};
  gid[0] = 0xfe;
  gid[1] = 0x80;
  for (int i = 0; i < 8; ++i) gid[8 + i] = static_cast<uint8_t>(guid >> (56 - 8 * i));
  return gid;
}

struct Catalog {
  std::vector<DeviceDescription> devices;
  std::string error;
};

// Parses one SOFTVERBS_LINK_LAYER word.
bool parse_link_layer(std::string_view word, LinkLayer& out) {
  if (word == "ib") {
    out = LinkLayer::kInfiniBand;
    return true;
  }
  if (word == "eth") {
    out = LinkLayer::kEthernet;
    return true;
  }
  return false;
}

// SOFTVERBS_LINK_LAYER: one word for every device or a comma list, one per device.
bool parse_link_layers(const char* text, std::vector<LinkLayer>& out, std::string& error) {
  std::string_view rest(text);
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view word = rest.substr(0, comma);
    LinkLayer link;
    if (!parse_link_layer(word, link)) {
      error = std::string("SOFTVERBS_LINK_LAYER='") + text +
              "' is not 'ib', 'eth' or a comma list of them (one per device)";
      return false;
    }
    out.push_back(link);
    if (comma == std::string_view::npos) return true;
    rest.remove_prefix(comma + 1);
  }
}

bool parse_device_count(const char* text, uint32_t& count, std::string& error) {
  char* end = nullptr;
  unsigned long parsed = std::strtoul(text, &end, 10);
  if (*end != '\0' || parsed > 16) {
    error = std::string("SOFTVERBS_DEVICES='") + text + "' is not a device count from 0 to 16";
    return false;
  }
  count = static_cast<uint32_t>(parsed);
  return true;
}

// How many devices, and each one's link layer.
bool read_layout(std::vector<LinkLayer>& links, std::string& error) {
  const char* count_text = std::getenv("SOFTVERBS_DEVICES");
  const bool count_given = count_text && *count_text;
  uint32_t count = 1;
  if (count_given && !parse_device_count(count_text, count, error)) return false;
  std::vector<LinkLayer> listed;
  const char* link_text = std::getenv("SOFTVERBS_LINK_LAYER");
  if (link_text && *link_text && !parse_link_layers(link_text, listed, error)) return false;
  if (listed.size() > 16) {
    error = std::string("SOFTVERBS_LINK_LAYER='") + link_text + "' names more than 16 devices";
    return false;
  }
  if (listed.size() > 1) {
    if (count_given && count != listed.size()) {
      error = std::string("SOFTVERBS_LINK_LAYER='") + link_text + "' names " +
              std::to_string(listed.size()) + " devices but SOFTVERBS_DEVICES=" + count_text +
              "; give one link layer per device, or a single one for all";
      return false;
    }
    links = listed;
    return true;
  }
  links.assign(count, listed.empty() ? LinkLayer::kInfiniBand : listed.front());
  return true;
}

// SOFTVERBS_PORTS: 1 or 2 ports on every InfiniBand device.
bool read_port_count(uint8_t& count, std::string& error) {
  const char* text = std::getenv("SOFTVERBS_PORTS");
  count = 1;
  if (!text || !*text) return true;
  if (std::strcmp(text, "1") != 0 && std::strcmp(text, "2") != 0) {
    error = std::string("SOFTVERBS_PORTS='") + text + "' is not a port count of 1 or 2";
    return false;
  }
  count = static_cast<uint8_t>(*text - '0');
  return true;
}

// Ports after the first of InfiniBand device `index`: LIDs after every
// device's port 1 (at most 16 devices), GIDs from their own port GUIDs.
std::vector<PortAddress> more_ports_of(uint32_t index, uint64_t node_guid, uint8_t count) {
  std::vector<PortAddress> ports;
  for (uint8_t p = 2; p <= count; ++p) {
    PortAddress port;
    port.lid = static_cast<uint16_t>(index + 1 + 16 * (p - 1));
    const uint64_t port_guid = node_guid + (uint64_t(p - 1) << 16);
    port.gids.push_back(GidEntry{link_local_gid(port_guid), 0, {}});
    ports.push_back(std::move(port));
  }
  return ports;
}

// One SOFTVERBS_MAX_* variable: unset keeps `limit`; else 1 to `limit`.
bool read_limit(const char* variable, uint32_t& limit, std::string& error) {
  const char* text = std::getenv(variable);
  if (!text || !*text) return true;
  char* end = nullptr;
  const unsigned long parsed = std::strtoul(text, &end, 10);
  if (*end != '\0' || parsed == 0 || parsed > limit) {
    error = std::string(variable) + "='" + text + "' is not a number from 1 to " +
            std::to_string(limit);
    return false;
  }
  limit = static_cast<uint32_t>(parsed);
  return true;
}

bool read_limits(ObjectLimits& limits, std::string& error) {
  return read_limit("SOFTVERBS_MAX_PD", limits.max_pd, error) &&
         read_limit("SOFTVERBS_MAX_CQ", limits.max_cq, error) &&
         read_limit("SOFTVERBS_MAX_QP", limits.max_qp, error) &&
         read_limit("SOFTVERBS_MAX_MR", limits.max_mr, error) &&
         read_limit("SOFTVERBS_MAX_SRQ", limits.max_srq, error) &&
         read_limit("SOFTVERBS_MAX_AH", limits.max_ah, error) &&
         read_limit("SOFTVERBS_MAX_MW", limits.max_mw, error);
}

Catalog build_catalog() {
  Catalog catalog;
  std::vector<LinkLayer> links;
  if (!read_layout(links, catalog.error)) return catalog;
  ObjectLimits limits;
  if (!read_limits(limits, catalog.error)) return catalog;
  uint8_t port_count = 1;
  if (!read_port_count(port_count, catalog.error)) return catalog;
  const std::vector<HostInterface> interfaces = host_interfaces();
  for (uint32_t i = 0; i < links.size(); ++i) {
    DeviceDescription d;
    d.name = "softverbs" + std::to_string(i);
    d.index = i;
    d.node_guid = kGuidPrefix | (i + 1);
    d.link_layer = links[i];
    d.limits = limits;
    const Gid default_gid = link_local_gid(d.node_guid);
    RocePort port = roce_port(i, default_gid, interfaces, kMaxOwnedAddresses);
    for (size_t g = 1; g < port.gids.size(); ++g) d.addresses.push_back(port.gids[g].gid);
    d.net_devices = std::move(port.net_devices);
    if (d.link_layer == LinkLayer::kEthernet) {
      if (port.gids.size() > kGidTableLen) port.gids.resize(kGidTableLen);
      d.gids = std::move(port.gids);
      d.active_mtu = port.active_mtu;
    } else {
      d.lid = static_cast<uint16_t>(i + 1);
      d.gids.push_back(GidEntry{default_gid, 0, {}});
      d.more_ports = more_ports_of(i, d.node_guid, port_count);
    }
    catalog.devices.push_back(std::move(d));
  }
  return catalog;
}

const Catalog& catalog() {
  // Never destroyed: the progress thread routes frames with it while static
  // objects are being torn down at exit.
  static const Catalog* instance = new Catalog(build_catalog());
  return *instance;
}

}  // namespace

std::vector<DeviceDescription> configured_devices(std::string* error) {
  if (error) *error = catalog().error;
  return catalog().devices;
}

uint8_t DeviceDescription::port_of_lid(uint16_t wanted) const {
  if (wanted == 0) return 0;
  for (uint8_t p = 1; p <= port_count(); ++p)
    if (lid_of(p) == wanted) return p;
  return 0;
}

uint8_t DeviceDescription::port_of_gid(const Gid& gid) const {
  for (uint8_t p = 1; p <= port_count(); ++p)
    for (const auto& entry : gids_of(p))
      if (entry.gid == gid) return p;
  return 0;
}

const DeviceDescription* find_device_by_index(uint32_t index) {
  const std::vector<DeviceDescription>& devices = catalog().devices;
  return index < devices.size() ? &devices[index] : nullptr;
}

const DeviceDescription* find_device_by_lid(uint16_t lid) {
  for (const auto& d : catalog().devices)
    if (d.port_of_lid(lid) != 0) return &d;
  return nullptr;
}

const DeviceDescription* find_device_by_address(const Gid& address) {
  for (const auto& d : catalog().devices)
    for (const Gid& owned : d.addresses)
      if (owned == address) return &d;
  return nullptr;
}

const DeviceDescription* find_device_by_gid(const Gid& gid) {
  for (const auto& d : catalog().devices)
    if (d.port_of_gid(gid) != 0) return &d;
  return nullptr;
}

}  // namespace softverbs
