#include "emulator/host/host_interfaces.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace softverbs {
namespace {

uint32_t interface_mtu(const char* name) {
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  ifreq request{};
  std::strncpy(request.ifr_name, name, IFNAMSIZ - 1);
  uint32_t mtu = ::ioctl(fd, SIOCGIFMTU, &request) == 0 ? static_cast<uint32_t>(request.ifr_mtu) : 0;
  ::close(fd);
  return mtu;
}

HostInterface& interface_named(std::vector<HostInterface>& list, const ifaddrs& entry) {
  for (auto& known : list)
    if (known.name == entry.ifa_name) return known;
  HostInterface added;
  added.name = entry.ifa_name;
  added.ifindex = ::if_nametoindex(entry.ifa_name);
  added.mtu = interface_mtu(entry.ifa_name);
  added.loopback = (entry.ifa_flags & IFF_LOOPBACK) != 0;
  list.push_back(std::move(added));
  return list.back();
}

void add_unique(std::vector<Gid>& gids, const Gid& gid) {
  if (std::find(gids.begin(), gids.end(), gid) == gids.end()) gids.push_back(gid);
}

}  // namespace

Gid ipv4_mapped_gid(uint32_t address_be) {
  Gid gid{};
  gid[10] = 0xff;
  gid[11] = 0xff;
  std::memcpy(&gid[12], &address_be, 4);
  return gid;
}

bool is_ipv4_mapped(const Gid& address) {
  for (size_t i = 0; i < 10; ++i)
    if (address[i] != 0) return false;
  return address[10] == 0xff && address[11] == 0xff;
}

std::vector<HostInterface> host_interfaces() {
  std::vector<HostInterface> list;
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return list;
  // IPv4 first, as the kernel fills a RoCE port's table.
  for (int family : {AF_INET, AF_INET6}) {
    for (const ifaddrs* entry = all; entry; entry = entry->ifa_next) {
      if (!entry->ifa_addr || entry->ifa_addr->sa_family != family) continue;
      if (!(entry->ifa_flags & IFF_UP)) continue;
      HostInterface& interface = interface_named(list, *entry);
      if (family == AF_INET) {
        const auto* ip = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
        add_unique(interface.addresses, ipv4_mapped_gid(ip->sin_addr.s_addr));
      } else {
        const auto* ip = reinterpret_cast<const sockaddr_in6*>(entry->ifa_addr);
        Gid gid;
        std::memcpy(gid.data(), ip->sin6_addr.s6_addr, gid.size());
        add_unique(interface.addresses, gid);
      }
    }
  }
  ::freeifaddrs(all);
  std::sort(list.begin(), list.end(),
            [](const HostInterface& a, const HostInterface& b) { return a.ifindex < b.ifindex; });
  return list;
}

}  // namespace softverbs
