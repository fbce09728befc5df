// The host's network interfaces as a RoCE port sees them: the addresses that
// become GIDs, the index that names each GID's net device, and the MTU that
// bounds the port's active MTU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "emulator/types.h"

namespace softverbs {

struct HostInterface {
  std::string name;             // "eth0"
  uint32_t ifindex = 0;
  uint32_t mtu = 0;             // bytes of IP payload per frame
  bool loopback = false;
  std::vector<Gid> addresses;   // IPv4 as IPv4-mapped IPv6, then IPv6
};

// The interfaces that are up, in ifindex order, each with its addresses.
// Reads getifaddrs(3) once per call; an interface without addresses is left out.
std::vector<HostInterface> host_interfaces();

// ::ffff:a.b.c.d for an IPv4 address in network byte order.
Gid ipv4_mapped_gid(uint32_t address_be);
// Whether an address is of that form: an IPv4 address.
bool is_ipv4_mapped(const Gid& address);

}  // namespace softverbs
