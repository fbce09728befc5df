#include "provider/rdmacm/kernel_devices.h"

#include <dirent.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>
#include <string>

#include "provider/rdmacm/cm_file_table.h"

namespace softverbs::provider {
namespace {

std::set<std::string> entries_of(const std::string& directory) {
  std::set<std::string> names;
  DIR* dir = ::opendir(directory.c_str());
  if (!dir) return names;
  while (dirent* entry = ::readdir(dir)) {
    if (entry->d_name[0] != '.') names.insert(entry->d_name);
  }
  ::closedir(dir);
  return names;
}

// The net devices kernel RDMA devices sit on: what a RoCE port's GID
// entries name (rxe, RoCE HCAs), and interfaces whose hardware is an RDMA
// device (IPoIB, a RoCE HCA's own netdev).
std::set<std::string> rdma_net_devices() {
  std::set<std::string> names;
  const std::string ib = "/sys/class/infiniband/";
  for (const std::string& device : entries_of(ib)) {
    for (const std::string& port : entries_of(ib + device + "/ports")) {
      const std::string ndevs = ib + device + "/ports/" + port + "/gid_attrs/ndevs/";
      for (const std::string& index : entries_of(ndevs)) {
        std::ifstream file(ndevs + index);
        std::string name;
        if (file >> name) names.insert(name);
      }
    }
  }
  const std::string net = "/sys/class/net/";
  for (const std::string& netdev : entries_of(net)) {
    struct stat st;
    if (::stat((net + netdev + "/device/infiniband").c_str(), &st) == 0) names.insert(netdev);
  }
  return names;
}

}  // namespace

bool is_any_or_loopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address);
    const uint32_t a = ntohl(in->sin_addr.s_addr);
    return a == INADDR_ANY || (a >> 24) == 127;
  }
  if (address->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address);
    if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) || IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr))
      return true;
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) return in6->sin6_addr.s6_addr[12] == 127;
    return false;
  }
  return true;  // no other family is an IP address here
}

namespace {

bool same_address(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                     &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr,
                     sizeof(in6_addr)) == 0;
}

}  // namespace

bool kernel_rdma_present() {
  struct stat st;
  return ::stat(kRdmaCmPath, &st) == 0 && S_ISCHR(st.st_mode) && !rdma_net_devices().empty();
}

bool kernel_owns_address(const sockaddr* address) {
  if (is_any_or_loopback(address)) return false;
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) return false;
  std::string netdev;
  for (ifaddrs* i = interfaces; i; i = i->ifa_next) {
    if (i->ifa_addr && same_address(i->ifa_addr, address)) {
      netdev = i->ifa_name;
      break;
    }
  }
  ::freeifaddrs(interfaces);
  return !netdev.empty() && rdma_net_devices().count(netdev) != 0;
}

bool kernel_reaches(const sockaddr* destination) {
  if (is_any_or_loopback(destination)) return false;
  if (kernel_owns_address(destination)) return true;
  sockaddr_storage toward{};
  const socklen_t length = destination->sa_family == AF_INET ? sizeof(sockaddr_in)
                                                             : sizeof(sockaddr_in6);
  std::memcpy(&toward, destination, length);
  // Any port: only the route is asked for.
  reinterpret_cast<sockaddr_in*>(&toward)->sin_port = htons(9);
  const int probe = ::socket(destination->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return false;
  sockaddr_storage source{};
  socklen_t source_length = sizeof source;
  const bool routed =
      ::connect(probe, reinterpret_cast<const sockaddr*>(&toward), length) == 0 &&
      ::getsockname(probe, reinterpret_cast<sockaddr*>(&source), &source_length) == 0;
  ::close(probe);
  return routed && kernel_owns_address(reinterpret_cast<const sockaddr*>(&source));
}

}  // namespace softverbs::provider
