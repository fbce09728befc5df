// Which soft devices exist and how they look. Read once per process from the
// environment, so every process that uses softverbs0 agrees on its identity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "emulator/roce_port.h"
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

struct DeviceDescription {
  std::string name;       // "softverbs0"
  uint32_t index = 0;     // position in the list, also the port's LID - 1
  uint64_t node_guid = 0; // host byte order
  LinkLayer link_layer = LinkLayer::kInfiniBand;
  uint16_t lid = 0;       // 0 on Ethernet
  std::vector<GidEntry> gids;  // GID table of port 1
  Mtu active_mtu = Mtu::k4096;  // the netdev's on Ethernet
  // The IP addresses it owns (roce_port.h), whatever its link layer: the
  // connection manager resolves them to it. On Ethernet also its GIDs.
  std::vector<Gid> addresses;
  ObjectLimits limits;
};

// SOFTVERBS_DEVICES: number of devices (default 1) named softverbs0..N-1.
// SOFTVERBS_LINK_LAYER: "ib" (default) or "eth" for every device, or one of
// them per device separated by commas ("ib,eth"); a list alone sets the
// number of devices. Ethernet devices take their GIDs from the host's
// interfaces (see roce_port.h).
// SOFTVERBS_MAX_PD, _CQ, _QP, _MR, _SRQ, _AH: lower a limit of ObjectLimits
// for every device (a number from 1 to the default).
// Returns an empty list and sets `error` to a readable reason on bad values.
std::vector<DeviceDescription> configured_devices(std::string* error = nullptr);

// Finds the local device that owns this LID or GID, or nullptr.
const DeviceDescription* find_device_by_lid(uint16_t lid);
const DeviceDescription* find_device_by_gid(const Gid& gid);
// The device that owns this IP address (IPv6 or IPv4-mapped), or nullptr.
const DeviceDescription* find_device_by_address(const Gid& address);

}  // namespace softverbs
