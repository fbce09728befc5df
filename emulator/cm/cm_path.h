// Route resolution on the soft fabric: the path record between two IP
// endpoints, built as the kernel builds it for RoCE (from the addresses'
// GIDs) or as a subnet manager would answer on InfiniBand (the ports'
// LIDs and GIDs).
#pragma once

#include <cstdint>

#include "emulator/cm/cm_types.h"
#include "emulator/host/device_config.h"

namespace softverbs::cm {

// Packet lifetime of every path (4.096 us * 2^18, about 1 s): the kernel's
// value for RoCE routes.
inline constexpr uint8_t kPathPacketLifeTime = 18;

// Soft device `index` of the configured list.
const DeviceDescription& device_at(uint32_t index);

// The path from `source` on device `device_index` to `destination`.
PathRecord resolve_path(uint32_t device_index, const IpEndpoint& source,
                        const IpEndpoint& destination);

// The GID the device sends from for that address: the address itself on
// Ethernet, the port GID on InfiniBand.
Gid gid_of(uint32_t device_index, const IpEndpoint& address);

// The index of `gid` in the device's GID table (0 when absent).
uint8_t gid_index_of(uint32_t device_index, const Gid& gid);

// The address of this host that the kernel's routing table sends from to
// reach `destination` (another host's): false when there is no route.
bool source_toward(const IpEndpoint& destination, Gid& source);

// 127.0.0.1 or ::1, for the family of `endpoint`, with its port.
IpEndpoint loopback_of(const IpEndpoint& endpoint);

// Where a QP of `device_index` sends to reach the far end of `path`.
AddressVector address_vector_for(uint32_t device_index, const PathRecord& path);

// The multicast GID of an IP multicast group on the device's link layer:
// the address itself on Ethernet (IPv4-mapped), ff12:401b:ffff:1::<IPv4>
// (the RDMA CM's UDP signature) or the IPv6 group on InfiniBand.
Gid multicast_gid_of(uint32_t device_index, const IpEndpoint& group);
// The multicast LID an InfiniBand group gets (0 on Ethernet).
uint16_t multicast_lid_of(uint32_t device_index, const Gid& mgid);

// The ACK timeout a QP uses for a path (IBTA 12.7.34, 9.7.6.1.3): twice
// the packet lifetime, and at least the remote CA's ACK delay.
uint8_t ack_timeout_for(uint8_t ca_ack_delay, uint8_t packet_life_time);

}  // namespace softverbs::cm
