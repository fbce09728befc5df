#include "emulator/cm/cm_path.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "emulator/host/device_config.h"
#include "emulator/packet/roce_v2.h"

namespace softverbs::cm {

const DeviceDescription& device_at(uint32_t index) {
  // configured_devices() copies, so keep one copy; never destroyed, as the
  // catalog, since the agent's thread may still run during exit.
  static const auto* devices = new std::vector<DeviceDescription>(configured_devices());
  return devices->at(index);
}

namespace {

// RoCEv2's flow label for a connection without one (the kernel's hash of
// the ports), so both directions of a connection use the same.
uint32_t roce_flow_label(uint16_t source_port, uint16_t destination_port) {
  return (uint32_t{source_port} * 31 + destination_port) & 0xfffff;
}

}  // namespace

Gid gid_of(uint32_t device_index, const IpEndpoint& address) {
  const DeviceDescription& device = device_at(device_index);
  if (device.link_layer == LinkLayer::kEthernet) return address.address;
  return device.gids.front().gid;
}

uint8_t gid_index_of(uint32_t device_index, const Gid& gid) {
  const DeviceDescription& device = device_at(device_index);
  for (size_t i = 0; i < device.gids.size(); ++i)
    if (device.gids[i].gid == gid) return static_cast<uint8_t>(i);
  return 0;
}

IpEndpoint loopback_of(const IpEndpoint& endpoint) {
  IpEndpoint loopback{{}, endpoint.port, endpoint.ipv4};
  if (endpoint.ipv4) {
    loopback.address[10] = loopback.address[11] = 0xff;
    loopback.address[12] = 127;
    loopback.address[15] = 1;
  } else {
    loopback.address[15] = 1;
  }
  return loopback;
}

uint8_t ack_timeout_for(uint8_t ca_ack_delay, uint8_t packet_life_time) {
  uint8_t timeout = packet_life_time + 1;
  if (ca_ack_delay >= timeout) timeout = ca_ack_delay + (ca_ack_delay >= packet_life_time);
  return std::min<uint8_t>(timeout, 31);
}

AddressVector address_vector_for(uint32_t device_index, const PathRecord& path) {
  AddressVector av;
  av.port_num = 1;
  av.sl = path.sl;
  if (device_at(device_index).link_layer == LinkLayer::kEthernet) {
    av.is_global = true;
    av.dgid = path.dgid;
    av.sgid_index = gid_index_of(device_index, path.sgid);
    av.hop_limit = path.hop_limit;
    av.flow_label = path.flow_label;
    av.traffic_class = path.traffic_class;
  } else {
    av.dlid = path.dlid;
  }
  return av;
}

Gid multicast_gid_of(uint32_t device_index, const IpEndpoint& group) {
  if (device_at(device_index).link_layer == LinkLayer::kEthernet || !group.ipv4)
    return group.address;
  Gid mgid{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0x00, 0x01};
  std::copy(group.address.begin() + 12, group.address.end(), mgid.begin() + 12);
  return mgid;
}

uint16_t multicast_lid_of(uint32_t device_index, const Gid& mgid) {
  if (device_at(device_index).link_layer == LinkLayer::kEthernet) return 0;
  // A LID per group, from its GID, in the multicast range 0xC000-0xFFFE.
  uint32_t hash = 0;
  for (uint8_t byte : mgid) hash = hash * 31 + byte;
  return static_cast<uint16_t>(0xc000 + hash % 0x3fff);
}

bool source_toward(const IpEndpoint& destination, Gid& source) {
  // A connected datagram socket sends nothing, but binds to the address its
  // route leaves from.
  const int fd = socket(destination.ipv4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_storage to{}, from{};
  socklen_t length;
  if (destination.ipv4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&to);
    in->sin_family = AF_INET;
    in->sin_port = htons(packet::kRoceV2UdpPort);
    std::memcpy(&in->sin_addr, destination.address.data() + 12, 4);
    length = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&to);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(packet::kRoceV2UdpPort);
    std::memcpy(&in6->sin6_addr, destination.address.data(), 16);
    length = sizeof(sockaddr_in6);
  }
  socklen_t from_length = sizeof from;
  const bool routed = connect(fd, reinterpret_cast<sockaddr*>(&to), length) == 0 &&
                      getsockname(fd, reinterpret_cast<sockaddr*>(&from), &from_length) == 0;
  close(fd);
  if (!routed) return false;
  source = Gid{};
  if (destination.ipv4) {
    source[10] = source[11] = 0xff;
    std::memcpy(source.data() + 12, &reinterpret_cast<sockaddr_in*>(&from)->sin_addr, 4);
  } else {
    std::memcpy(source.data(), &reinterpret_cast<sockaddr_in6*>(&from)->sin6_addr, 16);
  }
  return true;
}

PathRecord resolve_path(uint32_t device_index, const IpEndpoint& source,
                        const IpEndpoint& destination) {
  const DeviceDescription& local = device_at(device_index);
  const DeviceDescription* remote = find_device_by_address(destination.address);
  PathRecord path;
  path.packet_life_time = kPathPacketLifeTime;
  path.mtu = remote ? std::min(local.active_mtu, remote->active_mtu) : local.active_mtu;
  if (local.link_layer == LinkLayer::kEthernet) {
    path.sgid = source.address;
    path.dgid = destination.address;
    path.hop_limit = 64;
    path.flow_label = roce_flow_label(source.port, destination.port);
  } else {
    path.sgid = local.gids.front().gid;
    path.slid = local.lid;
    if (remote) {
      path.dgid = remote->gids.front().gid;
      path.dlid = remote->lid;
    }
  }
  return path;
}

}  // namespace softverbs::cm
