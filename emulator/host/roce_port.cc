#include "emulator/host/roce_port.h"

#include <arpa/inet.h>

#include <algorithm>

namespace softverbs {
namespace {

// GRH 40 + UDP 8 + BTH 12 + the largest extended headers (XRC 4 +
// AtomicETH 28) + ICRC 4: what a RoCEv2 packet adds to its payload.
constexpr uint32_t kRoceOverhead = 40 + 8 + 12 + 4 + 28 + 4;

const HostInterface* loopback_of(const std::vector<HostInterface>& interfaces) {
  for (const auto& interface : interfaces)
    if (interface.loopback) return &interface;
  return nullptr;
}

// The interface that names the default GID: the first one that is not
// loopback (as rxe is usually bound to eth0), else loopback.
const HostInterface* primary_of(const std::vector<HostInterface>& interfaces) {
  for (const auto& interface : interfaces)
    if (!interface.loopback) return &interface;
  return loopback_of(interfaces);
}

GidEntry entry(const Gid& gid, const HostInterface* interface) {
  GidEntry out;
  out.gid = gid;
  out.ifindex = interface ? interface->ifindex : 0;
  out.netdev = interface ? interface->name : "lo";
  return out;
}

RocePort host_port(const Gid& default_gid, const std::vector<HostInterface>& interfaces,
                   size_t table_length) {
  RocePort port;
  port.gids.push_back(entry(default_gid, primary_of(interfaces)));
  uint32_t smallest_mtu = 0;
  for (const auto& interface : interfaces) {
    if (interface.mtu != 0 && (smallest_mtu == 0 || interface.mtu < smallest_mtu))
      smallest_mtu = interface.mtu;
    for (const Gid& gid : interface.addresses)
      if (port.gids.size() < table_length) port.gids.push_back(entry(gid, &interface));
    if (!interface.loopback) port.net_devices.push_back(interface.name);
  }
  if (smallest_mtu != 0) port.active_mtu = roce_mtu(smallest_mtu);
  return port;
}

RocePort loopback_alias_port(uint32_t index, const Gid& default_gid,
                             const std::vector<HostInterface>& interfaces) {
  const HostInterface* loopback = loopback_of(interfaces);
  RocePort port;
  port.gids.push_back(entry(default_gid, loopback));
  const uint32_t alias = (127u << 24) | (index + 1);  // 127.0.0.(index+1)
  port.gids.push_back(entry(ipv4_mapped_gid(htonl(alias)), loopback));
  if (loopback && loopback->mtu != 0) port.active_mtu = roce_mtu(loopback->mtu);
  return port;
}

}  // namespace

Mtu roce_mtu(uint32_t netdev_mtu) {
  const uint32_t payload = netdev_mtu > kRoceOverhead ? netdev_mtu - kRoceOverhead : 0;
  for (Mtu mtu : {Mtu::k4096, Mtu::k2048, Mtu::k1024, Mtu::k512})
    if (payload >= mtu_bytes(mtu)) return mtu;
  return Mtu::k256;
}

RocePort roce_port(uint32_t index, const Gid& default_gid,
                   const std::vector<HostInterface>& interfaces, size_t table_length) {
  if (index == 0) return host_port(default_gid, interfaces, table_length);
  return loopback_alias_port(index, default_gid, interfaces);
}

}  // namespace softverbs
