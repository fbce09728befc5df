// How an Ethernet (RoCE) soft port takes its GIDs and MTU from the host's
// interfaces, as rxe takes them from the net device it is bound to.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "emulator/host/host_interfaces.h"
#include "emulator/types.h"

namespace softverbs {

struct GidEntry {
  Gid gid{};
  uint32_t ifindex = 0;  // the net device the address belongs to; 0 on InfiniBand
  std::string netdev;    // its name; empty on InfiniBand
};

struct RocePort {
  std::vector<GidEntry> gids;
  Mtu active_mtu = Mtu::k4096;
  // The interfaces whose addresses the device owns, loopback left out (no
  // HCA sits under lo): what the kernel lists in an RDMA device's
  // device/net/, where tools look for the address to reach it by.
  std::vector<std::string> net_devices;
};

// The largest IB MTU whose packet, with every RoCEv2 header, fits a frame of
// `netdev_mtu` bytes (the kernel's rule for RoCE ports).
Mtu roce_mtu(uint32_t netdev_mtu);

// The port of softverbs<index> on Ethernet. Every soft device owns IP
// addresses (the connection manager resolves them to it): softverbs0 every
// address of the host, loopback included, and softverbsN (N > 0)
// 127.0.0.(N+1) on the loopback interface. On Ethernet these are its GIDs,
// after index 0, `default_gid`, the link-local GID made from the node GUID;
// the port runs at the smallest MTU among those interfaces.
RocePort roce_port(uint32_t index, const Gid& default_gid,
                   const std::vector<HostInterface>& interfaces, size_t table_length);

}  // namespace softverbs
