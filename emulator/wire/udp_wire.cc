// Sockets of the UDP wire. What the ICRC covers but a socket does not show
// (the IP header) is rebuilt from the ancillary data recvmmsg gives:
// the destination address (PKTINFO), the traffic class and the TTL.
// Equal datagrams of one flow may arrive coalesced (UDP GRO): one buffer
// holding them back to back, with the size of each in the ancillary data.
#include "emulator/wire/udp_wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "emulator/packet/codec.h"
#include "emulator/packet/frame_fields.h"
#include "emulator/wire/fork_closed_fds.h"

namespace softverbs {
namespace {

using packet::RoceV2Addressing;

constexpr size_t kDatagramBytes = packet::kMaxFrameBytes;
// Room for a datagram coalesced by UDP GRO: at most an IP packet's 64 KiB.
constexpr size_t kCoalescedBytes = 64 * 1024;
// PKTINFO, traffic class, TTL and the GRO segment size, each with its header.
constexpr size_t kControlBytes = 160;

void set_int(int fd, int level, int name, int value) {
  setsockopt(fd, level, name, &value, sizeof value);
}

// As large as the kernel allows: beyond net.core.rmem_max only with
// CAP_NET_ADMIN (the *FORCE options), else capped there.
void enlarge_buffers(int fd, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
    set_int(fd, SOL_SOCKET, SO_RCVBUF, bytes);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bytes, sizeof bytes) != 0)
    set_int(fd, SOL_SOCKET, SO_SNDBUF, bytes);
}

// A datagram socket of one family bound to `port` on every address, shared
// with this user's other sockets on the port. Path-MTU discovery is forced:
// DF set, never fragmented locally, and (IPv4) identification 0, as the
// ICRC computation assumes.
int bound_socket(bool ipv4, uint16_t port, Errno& err) {
  const int fd = socket(ipv4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    err = errno;
    return -1;
  }
  set_int(fd, SOL_SOCKET, SO_REUSEPORT, 1);
  if (ipv4) {
    set_int(fd, IPPROTO_IP, IP_MULTICAST_LOOP, 0);
    set_int(fd, IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO);
    set_int(fd, IPPROTO_IP, IP_PKTINFO, 1);
    set_int(fd, IPPROTO_IP, IP_RECVTOS, 1);
    set_int(fd, IPPROTO_IP, IP_RECVTTL, 1);
  } else {
    set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, 1);
    set_int(fd, IPPROTO_IPV6, IPV6_MULTICAST_LOOP, 0);
    set_int(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, IPV6_PMTUDISC_DO);
    set_int(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, 1);
    set_int(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, 1);
    set_int(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, 1);
  }
  sockaddr_storage address{};
  socklen_t length;
  if (ipv4) {
    auto* a = reinterpret_cast<sockaddr_in*>(&address);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    length = sizeof(sockaddr_in);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&address);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    a->sin6_addr = in6addr_any;
    length = sizeof(sockaddr_in6);
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    err = errno;
    close(fd);
    return -1;
  }
  close_in_forked_child(fd);
  return fd;
}

// Closes a descriptor that forked children close by themselves
// (close_in_forked_child): the wire's sockets, its epoll and eventfd.
void close_kept_from_children(int fd) {
  keep_in_forked_child(fd);
  close(fd);
}

Gid gid_of(const in_addr& a) {
  Gid gid{};
  gid[10] = 0xff;
  gid[11] = 0xff;
  std::memcpy(gid.data() + 12, &a, 4);
  return gid;
}

Gid gid_of(const in6_addr& a) {
  Gid gid{};
  std::memcpy(gid.data(), &a, 16);
  return gid;
}

// Where a datagram came from and went to, from its name and ancillary data.
bool read_addressing(const msghdr& m, uint16_t port, RoceV2Addressing& a) {
  a.destination_port = port;
  const auto* from = static_cast<const sockaddr*>(m.msg_name);
  if (from->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(from);
    a.source = gid_of(in->sin_addr);
    a.source_port = ntohs(in->sin_port);
  } else {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(from);
    a.source = gid_of(in6->sin6_addr);
    a.source_port = ntohs(in6->sin6_port);
  }
  bool have_destination = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(const_cast<msghdr*>(&m)); c;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&m), c)) {
    const void* data = CMSG_DATA(c);
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO) {
      in_pktinfo info;
      std::memcpy(&info, data, sizeof info);
      a.destination = gid_of(info.ipi_addr);
      have_destination = true;
    } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
      a.traffic_class = *static_cast<const uint8_t*>(data);
    } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) {
      int ttl;
      std::memcpy(&ttl, data, sizeof ttl);
      a.hop_limit = static_cast<uint8_t>(ttl);
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO) {
      in6_pktinfo info;
      std::memcpy(&info, data, sizeof info);
      a.destination = gid_of(info.ipi6_addr);
      have_destination = true;
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
      int tclass;
      std::memcpy(&tclass, data, sizeof tclass);
      a.traffic_class = static_cast<uint8_t>(tclass);
    } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT) {
      int hops;
      std::memcpy(&hops, data, sizeof hops);
      a.hop_limit = static_cast<uint8_t>(hops);
    }
  }
  return have_destination;
}

// The size of each datagram in a buffer the kernel coalesced (UDP GRO), or
// 0 when the buffer holds one datagram.
size_t coalesced_segment_bytes(const msghdr& m) {
  for (cmsghdr* c = CMSG_FIRSTHDR(const_cast<msghdr*>(&m)); c;
       c = CMSG_NXTHDR(const_cast<msghdr*>(&m), c))
    if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
      int bytes;
      std::memcpy(&bytes, CMSG_DATA(c), sizeof bytes);
      return bytes > 0 ? static_cast<size_t>(bytes) : 0;
    }
  return 0;
}

}  // namespace

struct UdpWire::ReceiveBuffers {
  std::array<std::array<uint8_t, kCoalescedBytes>, kReceiveBatch> datagrams;
  std::array<std::array<uint8_t, kControlBytes>, kReceiveBatch> controls;
  std::array<sockaddr_in6, kReceiveBatch> names;
  std::array<iovec, kReceiveBatch> iovecs;
  std::array<mmsghdr, kReceiveBatch> messages;
  std::array<uint8_t, kDatagramBytes + packet::kRoceV2MaxHeaderBytes> frame;
};

uint16_t UdpWire::configured_port() {
  const char* text = std::getenv("SOFTVERBS_UDP_PORT");
  if (!text || !*text) return packet::kRoceV2UdpPort;
  char* end = nullptr;
  const unsigned long port = std::strtoul(text, &end, 10);
  if (*end != '\0' || port == 0 || port > 65535) {
    std::fprintf(stderr,
                 "softverbs: SOFTVERBS_UDP_PORT='%s' is not a UDP port from 1 to 65535; "
                 "using %u\n",
                 text, unsigned{packet::kRoceV2UdpPort});
    return packet::kRoceV2UdpPort;
  }
  return static_cast<uint16_t>(port);
}

UdpWire::UdpWire(uint16_t port)
    // Not zeroed: a megabyte of buffers costs memory only once datagrams fill it.
    : port_(port), receive_buffers_(std::make_unique_for_overwrite<ReceiveBuffers>()) {}

std::unique_ptr<UdpWire> UdpWire::open(uint16_t port, Errno& err) {
  std::unique_ptr<UdpWire> wire(new UdpWire(port));
  wire->ipv4_fd_ = bound_socket(true, port, err);
  if (wire->ipv4_fd_ < 0) return nullptr;
  Errno ipv6_err = 0;
  wire->ipv6_fd_ = bound_socket(false, port, ipv6_err);  // absent where IPv6 is off
  if (wire->ipv6_fd_ < 0 && ipv6_err == EADDRINUSE) {
    err = EADDRINUSE;
    return nullptr;
  }
  for (int fd : {wire->ipv4_fd_, wire->ipv6_fd_}) {
    if (fd < 0) continue;
    enlarge_buffers(fd, kSocketBufferBytes);
    // A GSO send from another namespace or host then arrives whole instead
    // of cut into datagrams by the kernel first (absent before Linux 5.0).
    set_int(fd, SOL_UDP, UDP_GRO, 1);
  }

  wire->epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wire->interrupt_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wire->epoll_fd_ < 0 || wire->interrupt_fd_ < 0) {
    err = errno;
    return nullptr;
  }
  close_in_forked_child(wire->epoll_fd_);
  close_in_forked_child(wire->interrupt_fd_);
  for (int fd : {wire->ipv4_fd_, wire->ipv6_fd_, wire->interrupt_fd_}) {
    if (fd < 0) continue;
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = fd;
    epoll_ctl(wire->epoll_fd_, EPOLL_CTL_ADD, fd, &event);
  }
  err = 0;
  return wire;
}

UdpWire::~UdpWire() {
  // The port's sockets first: until they close, the kernel may hand them
  // datagrams no one will read.
  for (int fd : {ipv4_fd_, ipv6_fd_, epoll_fd_, interrupt_fd_})
    if (fd >= 0) close_kept_from_children(fd);
  for (auto& [key, fd] : source_port_fds_)
    if (fd >= 0) close_kept_from_children(fd);
}

// The socket a flow leaves from: one bound to its source port, made on first
// use; the 4791 socket when that port cannot be had.
int UdpWire::socket_for(bool ipv4, uint16_t source_port) {
  const int fallback = ipv4 ? ipv4_fd_ : ipv6_fd_;
  const uint32_t key = uint32_t{ipv4} << 16 | source_port;
  std::lock_guard lock(source_ports_mutex_);
  if (auto it = source_port_fds_.find(key); it != source_port_fds_.end())
    return it->second >= 0 ? it->second : fallback;
  if (source_port_fds_.size() >= kMaxSourcePorts) return fallback;
  Errno err = 0;
  const int fd = bound_socket(ipv4, source_port, err);
  // Nothing is ever sent to a source port: keep its receive buffer small.
  if (fd >= 0) {
    set_int(fd, SOL_SOCKET, SO_RCVBUF, 4096);
    set_int(fd, SOL_SOCKET, SO_SNDBUF, kSocketBufferBytes);
  }
  source_port_fds_[key] = fd;
  return fd >= 0 ? fd : fallback;
}

size_t UdpWire::receive(const std::function<void(std::span<const uint8_t>)>& deliver,
                        size_t budget) {
  std::unique_lock lock(receive_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;
  size_t taken = 0;
  for (int fd : {ipv4_fd_, ipv6_fd_})
    if (fd >= 0 && taken < budget) taken += receive_from(fd, deliver, budget - taken);
  return taken;
}

size_t UdpWire::receive_from(int fd, const std::function<void(std::span<const uint8_t>)>& deliver,
                             size_t budget) {
  ReceiveBuffers& b = *receive_buffers_;
  const size_t batch = std::min(budget, kReceiveBatch);
  for (size_t i = 0; i < batch; ++i) {
    b.iovecs[i] = iovec{b.datagrams[i].data(), kCoalescedBytes};
    msghdr& m = b.messages[i].msg_hdr;
    m = msghdr{};
    m.msg_name = &b.names[i];
    m.msg_namelen = sizeof(sockaddr_in6);
    m.msg_iov = &b.iovecs[i];
    m.msg_iovlen = 1;
    m.msg_control = b.controls[i].data();
    m.msg_controllen = kControlBytes;
  }
  const int n = recvmmsg(fd, b.messages.data(), static_cast<unsigned>(batch), MSG_DONTWAIT,
                         nullptr);
  if (n <= 0) return 0;
  size_t datagrams = 0;
  for (int i = 0; i < n; ++i) {
    const msghdr& m = b.messages[i].msg_hdr;
    const std::span<const uint8_t> bytes(b.datagrams[i].data(), b.messages[i].msg_len);
    RoceV2Addressing a;
    if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || !read_addressing(m, port_, a)) {
      ++datagrams;
      dropped_malformed_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    const size_t segment_bytes = coalesced_segment_bytes(m);
    if (segment_bytes == 0 || segment_bytes >= bytes.size()) {
      ++datagrams;
      take_datagram(a, bytes, deliver);
      continue;
    }
    // Back to back, all of one size but the last; each has its own ICRC,
    // made for the IPv4 identification it had on the wire.
    const size_t segments = (bytes.size() + segment_bytes - 1) / segment_bytes;
    datagrams += segments;
    coalesced_receives_.fetch_add(1, std::memory_order_relaxed);
    coalesced_datagrams_.fetch_add(segments, std::memory_order_relaxed);
    for (size_t offset = 0; offset < bytes.size(); offset += segment_bytes)
      take_datagram(a, bytes.subspan(offset, std::min(segment_bytes, bytes.size() - offset)),
                    deliver);
  }
  received_.fetch_add(datagrams, std::memory_order_relaxed);
  return datagrams;
}

// One RoCEv2 datagram: checked, made a frame, delivered, or counted as dropped.
void UdpWire::take_datagram(const RoceV2Addressing& a, std::span<const uint8_t> datagram,
                            const std::function<void(std::span<const uint8_t>)>& deliver) {
  std::span<const uint8_t> frame;
  const packet::DecodeError e = packet::roce_v2_to_ib(a, datagram, receive_buffers_->frame, frame);
  if (e == packet::DecodeError::kBadIcrc)
    dropped_bad_icrc_.fetch_add(1, std::memory_order_relaxed);
  else if (e != packet::DecodeError::kNone)
    dropped_malformed_.fetch_add(1, std::memory_order_relaxed);
  else
    deliver(frame);
}

// Membership is the socket's, for every interface it names; joins are
// counted so that the last QP to leave ends it.
void UdpWire::join_group(const Gid& group, uint32_t ifindex) {
  std::lock_guard lock(groups_mutex_);
  for (auto& [key, joins] : groups_)
    if (key.first == group && key.second == ifindex) {
      ++joins;
      return;
    }
  groups_.push_back({{group, ifindex}, 1});
  set_membership(group, ifindex, true);
}

void UdpWire::leave_group(const Gid& group, uint32_t ifindex) {
  std::lock_guard lock(groups_mutex_);
  for (auto it = groups_.begin(); it != groups_.end(); ++it) {
    if (it->first.first != group || it->first.second != ifindex) continue;
    if (--it->second == 0) {
      set_membership(group, ifindex, false);
      groups_.erase(it);
    }
    return;
  }
}

void UdpWire::set_membership(const Gid& group, uint32_t ifindex, bool member) {
  if (packet::is_ipv4_mapped(group)) {
    ip_mreqn request{};
    std::memcpy(&request.imr_multiaddr, group.data() + 12, 4);
    request.imr_ifindex = static_cast<int>(ifindex);
    setsockopt(ipv4_fd_, IPPROTO_IP, member ? IP_ADD_MEMBERSHIP : IP_DROP_MEMBERSHIP, &request,
               sizeof request);
  } else if (ipv6_fd_ >= 0) {
    ipv6_mreq request{};
    std::memcpy(&request.ipv6mr_multiaddr, group.data(), 16);
    request.ipv6mr_interface = ifindex;
    setsockopt(ipv6_fd_, IPPROTO_IPV6, member ? IPV6_ADD_MEMBERSHIP : IPV6_DROP_MEMBERSHIP,
               &request, sizeof request);
  }
}

void UdpWire::wait_readable() {
  epoll_event events[3];
  while (epoll_wait(epoll_fd_, events, 3, -1) < 0 && errno == EINTR) {
  }
}

void UdpWire::interrupt() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(interrupt_fd_, &one, sizeof one);
}

void UdpWire::leave_port() {
  for (int fd : {ipv4_fd_, ipv6_fd_}) {
    if (fd < 0) continue;
    sockaddr_storage bound{};
    socklen_t length = sizeof bound;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) continue;
    const int unbound = socket(bound.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    // Should either call fail, the socket keeps the port until the process ends.
    if (unbound < 0) continue;
    [[maybe_unused]] const int replaced = dup3(unbound, fd, O_CLOEXEC);
    close(unbound);
  }
}

void UdpWire::add_counters(WireCounters& c) const {
  c.udp_datagrams_sent += sent_.load(std::memory_order_relaxed);
  c.udp_datagrams_received += received_.load(std::memory_order_relaxed);
  c.udp_send_failures += send_failures_.load(std::memory_order_relaxed);
  c.udp_segmented_sends += segmented_sends_.load(std::memory_order_relaxed);
  c.udp_segmented_datagrams += segmented_datagrams_.load(std::memory_order_relaxed);
  c.udp_coalesced_receives += coalesced_receives_.load(std::memory_order_relaxed);
  c.udp_coalesced_datagrams += coalesced_datagrams_.load(std::memory_order_relaxed);
  c.udp_dropped_malformed += dropped_malformed_.load(std::memory_order_relaxed);
  c.udp_dropped_bad_icrc += dropped_bad_icrc_.load(std::memory_order_relaxed);
}

}  // namespace softverbs
