// Which soft devices exist and how they look. Read once per process from the
// environment, so every process that uses softverbs0 agrees on its identity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "emulator/host/roce_port.h"
#include "emulator/types.h"

namespace softverbs {

enum class LinkLayer : uint8_t { kInfiniBand, kEthernet };

// How many objects of each kind a device holds in one process at most
// (object_quota.h), as ibv_query_device reports them.
inline constexpr uint32_t kMaxQp = 1u << 16;
inline constexpr uint32_t kMaxCq = 1u << 16;
inline constexpr uint32_t kMaxMr = 1u << 20;
inline constexpr uint32_t kMaxPd = 1u << 16;
inline constexpr uint32_t kMaxSrq = 1u << 16;
inline constexpr uint32_t kMaxAh = 1u << 20;
inline constexpr uint32_t kMaxMw = 1u << 20;

struct ObjectLimits {
  uint32_t max_pd = kMaxPd;
  uint32_t max_cq = kMaxCq;
  uint32_t max_qp = kMaxQp;
  uint32_t max_mr = kMaxMr;
  uint32_t max_srq = kMaxSrq;
  uint32_t max_ah = kMaxAh;
  uint32_t max_mw = kMaxMw;
};

// An InfiniBand device has one or two ports (SOFTVERBS_PORTS), each with
// its own LID and GUID, so a QP can have an alternate path (path_migration.h);
// an Ethernet device has the one port of its netdev.
inline constexpr uint8_t kMaxPorts = 2;

// How a port after the first is addressed.
struct PortAddress {
  uint16_t lid = 0;
  std::vector<GidEntry> gids;
};

struct DeviceDescription {
  std::string name;       // "softverbs0"
  uint32_t index = 0;     // position in the list, also port 1's LID - 1
  uint64_t node_guid = 0; // host byte order
  LinkLayer link_layer = LinkLayer::kInfiniBand;
  uint16_t lid = 0;       // port 1's; 0 on Ethernet
  std::vector<GidEntry> gids;  // GID table of port 1
  std::vector<PortAddress> more_ports;  // ports 2..
  Mtu active_mtu = Mtu::k4096;  // the netdev's on Ethernet
  // The IP addresses it owns (roce_port.h), whatever its link layer: the
  // connection manager resolves them to it. On Ethernet also its GIDs.
  std::vector<Gid> addresses;
  // The net devices that hold those addresses, loopback left out: sysfs'
  // device/net/ (RocePort::net_devices).
  std::vector<std::string> net_devices;
  ObjectLimits limits;

  uint8_t port_count() const { return static_cast<uint8_t>(1 + more_ports.size()); }
  bool has_port(uint8_t port) const { return port >= 1 && port <= port_count(); }
  // The LID and GID table of port `port` (1-based, has_port(port)).
  uint16_t lid_of(uint8_t port) const { return port <= 1 ? lid : more_ports[port - 2].lid; }
  const std::vector<GidEntry>& gids_of(uint8_t port) const {
    return port <= 1 ? gids : more_ports[port - 2].gids;
  }
  // The port that owns this LID or GID, or 0.
  uint8_t port_of_lid(uint16_t lid) const;
  uint8_t port_of_gid(const Gid& gid) const;
};

// SOFTVERBS_DEVICES: number of devices (default 1) named softverbs0..N-1.
// SOFTVERBS_LINK_LAYER: "ib" (default) or "eth" for every device, or one of
// them per device separated by commas ("ib,eth"); a list alone sets the
// number of devices. Ethernet devices take their GIDs from the host's
// interfaces (see roce_port.h).
// SOFTVERBS_PORTS: ports per InfiniBand device, 1 (default) or 2. Port p of
// device i has LID i + 1 + 16 * (p - 1) and GUID node GUID + (p - 1) << 16.
// SOFTVERBS_MAX_PD, _CQ, _QP, _MR, _SRQ, _AH: lower a limit of ObjectLimits
// for every device (a number from 1 to the default).
// Returns an empty list and sets `error` to a readable reason on bad values.
std::vector<DeviceDescription> configured_devices(std::string* error = nullptr);

// The configured device with this index, or nullptr.
const DeviceDescription* find_device_by_index(uint32_t index);
// Finds the local device that owns this LID or GID, or nullptr.
const DeviceDescription* find_device_by_lid(uint16_t lid);
const DeviceDescription* find_device_by_gid(const Gid& gid);
// The device that owns this IP address (IPv6 or IPv4-mapped), or nullptr.
const DeviceDescription* find_device_by_address(const Gid& address);

}  // namespace softverbs
