// The send side of the UDP wire: datagrams composed into a per-thread batch
// (the frame made RoCEv2, its source address and traffic class as ancillary
// data) and sent run by run of one socket: equal ones to one destination as
// one UDP GSO send, the rest with sendmmsg.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "emulator/packet/codec.h"
#include "emulator/packet/frame_fields.h"
#include "emulator/wire/udp_wire.h"

namespace softverbs {
namespace {

using packet::RoceV2Addressing;

constexpr size_t kDatagramBytes = packet::kMaxFrameBytes;
thread_local unsigned t_burst_depth = 0;  // bursts begun and not ended

}  // namespace

// Datagrams this thread has composed and not yet sent, each with the socket
// it leaves from: outside a burst one at a time, in a burst up to
// kSendBatch, all for one wire. Made on a thread's first send.
struct UdpWire::PendingSends {
  static constexpr size_t kControlBytes =
      CMSG_SPACE(sizeof(in6_pktinfo)) + CMSG_SPACE(sizeof(int));

  UdpWire* wire = nullptr;
  size_t count = 0;
  std::array<std::array<uint8_t, kDatagramBytes + packet::kRoceV2MaxHeaderBytes>, kSendBatch>
      datagrams;
  std::array<sockaddr_storage, kSendBatch> names;
  struct alignas(cmsghdr) Control {
    std::array<uint8_t, kControlBytes> bytes;
  };
  std::array<Control, kSendBatch> controls;
  std::array<iovec, kSendBatch> iovecs;
  std::array<mmsghdr, kSendBatch> messages;
  std::array<int, kSendBatch> fds;
  std::array<bool, kSendBatch> ipv4;
};

// Counts of one flush, added to the wire's counters at its end.
struct UdpWire::SendTally {
  uint64_t sent = 0;
  uint64_t refused = 0;
};

UdpWire::PendingSends& UdpWire::pending() {
  thread_local std::unique_ptr<PendingSends> sends;
  if (!sends) sends = std::make_unique<PendingSends>();
  return *sends;
}

void UdpWire::begin_burst() { ++t_burst_depth; }

void UdpWire::end_burst() {
  if (t_burst_depth > 0 && --t_burst_depth == 0) {
    PendingSends& p = pending();
    if (p.count > 0) flush(p);
  }
}

// Sends what is pending, run by run of datagrams that share a socket.
// Returns how many the sockets refused.
uint64_t UdpWire::flush(PendingSends& p) {
  SendTally tally;
  for (size_t begin = 0; begin < p.count;) {
    size_t end = begin + 1;
    while (end < p.count && p.fds[end] == p.fds[begin]) ++end;
    p.wire->send_run(p, begin, end, tally);
    begin = end;
  }
  p.wire->sent_.fetch_add(tally.sent, std::memory_order_relaxed);
  if (tally.refused) p.wire->send_failures_.fetch_add(tally.refused, std::memory_order_relaxed);
  p.count = 0;
  return tally.refused;
}

// Datagrams [begin, end) of one socket: a stretch of equal-sized ones to
// one destination goes as one UDP GSO send, the rest with sendmmsg.
void UdpWire::send_run(PendingSends& p, size_t begin, size_t end, SendTally& tally) {
  size_t unsent = begin;
  for (size_t next = begin; next < end;) {
    const size_t segments =
        gso_works_.load(std::memory_order_relaxed) ? gso_group(p, next, end) : 1;
    if (segments < 2) {
      ++next;
      continue;
    }
    send_each(p, unsent, next, tally);
    if (!send_segmented(p, next, segments, tally)) send_each(p, next, next + segments, tally);
    next += segments;
    unsent = next;
  }
  send_each(p, unsent, end, tally);
}

// sendmmsg over [begin, end), all of one socket. A datagram the socket
// refuses is dropped and counted; the ones after it are tried again.
void UdpWire::send_each(PendingSends& p, size_t begin, size_t end, SendTally& tally) {
  for (size_t next = begin; next < end;) {
    const int n = sendmmsg(p.fds[begin], &p.messages[next], static_cast<unsigned>(end - next),
                           MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      tally.sent += static_cast<uint64_t>(n);
      next += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      ++tally.refused;
      ++next;
    }
  }
}

// How many datagrams from `first` on can be one GSO send: same
// destination and ancillary data, all of the first one's size but the
// last, which may be shorter.
size_t UdpWire::gso_group(const PendingSends& p, size_t first, size_t end) {
  const msghdr& head = p.messages[first].msg_hdr;
  const size_t segment = p.iovecs[first].iov_len;
  size_t total = segment, count = 1;
  while (first + count < end && total + segment <= kMaxGsoBytes) {
    const size_t i = first + count;
    const msghdr& m = p.messages[i].msg_hdr;
    const size_t length = p.iovecs[i].iov_len;
    if (length > segment || m.msg_namelen != head.msg_namelen ||
        std::memcmp(m.msg_name, head.msg_name, head.msg_namelen) != 0 ||
        m.msg_controllen != head.msg_controllen ||
        std::memcmp(m.msg_control, head.msg_control, head.msg_controllen) != 0)
      break;
    // A shorter second one (the first was a FIRST packet with its RETH):
    // the first goes alone, the rest may make a stretch of their own.
    if (length < segment && count == 1) break;
    total += length;
    ++count;
    if (length < segment) break;
  }
  return count;
}

// One sendmsg with UDP_SEGMENT: the kernel cuts it into the datagrams
// again (in software, or in the NIC). Each IPv4 segment k leaves with
// identification k, so its ICRC is made for k first. False, with the
// ICRCs as they were, when this kernel or route has no UDP GSO: then the
// wire stops trying.
bool UdpWire::send_segmented(PendingSends& p, size_t first, size_t count, SendTally& tally) {
  const auto renumber = [&] {
    for (size_t k = 1; k < count; ++k)
      if (p.ipv4[first + k])
        packet::toggle_ipv4_identification(
            std::span(static_cast<uint8_t*>(p.iovecs[first + k].iov_base),
                      p.iovecs[first + k].iov_len),
            static_cast<uint16_t>(k));
  };
  const msghdr& head = p.messages[first].msg_hdr;
  struct alignas(cmsghdr) {
    std::array<uint8_t, PendingSends::kControlBytes + CMSG_SPACE(sizeof(uint16_t))> bytes{};
  } control;
  std::memcpy(control.bytes.data(), head.msg_control, head.msg_controllen);
  msghdr m = head;
  m.msg_iov = &p.iovecs[first];
  m.msg_iovlen = count;
  m.msg_control = control.bytes.data();
  m.msg_controllen = head.msg_controllen + CMSG_SPACE(sizeof(uint16_t));
  cmsghdr* c = reinterpret_cast<cmsghdr*>(control.bytes.data() + head.msg_controllen);
  c->cmsg_level = SOL_UDP;
  c->cmsg_type = UDP_SEGMENT;
  c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
  const auto segment = static_cast<uint16_t>(p.iovecs[first].iov_len);
  std::memcpy(CMSG_DATA(c), &segment, sizeof segment);

  renumber();
  ssize_t n;
  do {
    n = sendmsg(p.fds[first], &m, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n >= 0) {
    tally.sent += count;
    segmented_sends_.fetch_add(1, std::memory_order_relaxed);
    segmented_datagrams_.fetch_add(count, std::memory_order_relaxed);
    return true;
  }
  if (errno == EAGAIN || errno == ENOBUFS || errno == EHOSTUNREACH || errno == ENETUNREACH) {
    tally.refused += count;  // lost as the datagrams alone would have been
    return true;
  }
  renumber();  // back to identification 0 for sending one by one
  gso_works_.store(false, std::memory_order_relaxed);
  return false;
}

// Writes the datagram of `frame` into slot `i` of `p`: payload, destination,
// and as ancillary data the source address (the SGID's, so the IP header
// says what the ICRC was computed over) and the traffic class. The socket
// it leaves from, or -1.
int UdpWire::compose(std::span<const uint8_t> frame, uint32_t multicast_ifindex,
                     PendingSends& p, size_t i) {
  RoceV2Addressing a;
  a.destination_port = port_;
  // The destination QPN picks the flow's source port.
  a.source_port = packet::roce_v2_source_port(packet::frame_dest_qp(frame));
  const std::span<const uint8_t> payload = packet::ib_to_roce_v2(frame, a, p.datagrams[i]);
  if (payload.empty()) return -1;
  const bool ipv4 = packet::is_ipv4_mapped(a.destination);
  // A damaged frame's DestQP may be any: it must not open a socket of its own.
  const int fd = a.damaged ? (ipv4 ? ipv4_fd_ : ipv6_fd_) : socket_for(ipv4, a.source_port);
  if (fd < 0) return -1;
  p.ipv4[i] = ipv4;

  msghdr& m = p.messages[i].msg_hdr;
  m = msghdr{};
  p.names[i] = sockaddr_storage{};
  // Zeroed: CMSG_NXTHDR reads the length field of the header it moves to.
  p.controls[i] = PendingSends::Control{};
  m.msg_name = &p.names[i];
  m.msg_control = p.controls[i].bytes.data();
  cmsghdr* c;
  if (ipv4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&p.names[i]);
    in->sin_family = AF_INET;
    in->sin_port = htons(port_);
    std::memcpy(&in->sin_addr, a.destination.data() + 12, 4);
    m.msg_namelen = sizeof(sockaddr_in);
    m.msg_controllen = CMSG_SPACE(sizeof(in_pktinfo)) + CMSG_SPACE(sizeof(int));
    c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = IPPROTO_IP;
    c->cmsg_type = IP_PKTINFO;
    c->cmsg_len = CMSG_LEN(sizeof(in_pktinfo));
    in_pktinfo info{};
    std::memcpy(&info.ipi_spec_dst, a.source.data() + 12, 4);
    if (packet::is_ip_multicast(a.destination)) info.ipi_ifindex = static_cast<int>(multicast_ifindex);
    std::memcpy(CMSG_DATA(c), &info, sizeof info);
    c = CMSG_NXTHDR(&m, c);
    c->cmsg_level = IPPROTO_IP;
    c->cmsg_type = IP_TOS;
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&p.names[i]);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port_);
    std::memcpy(&in6->sin6_addr, a.destination.data(), 16);
    m.msg_namelen = sizeof(sockaddr_in6);
    m.msg_controllen = CMSG_SPACE(sizeof(in6_pktinfo)) + CMSG_SPACE(sizeof(int));
    c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = IPPROTO_IPV6;
    c->cmsg_type = IPV6_PKTINFO;
    c->cmsg_len = CMSG_LEN(sizeof(in6_pktinfo));
    in6_pktinfo info{};
    std::memcpy(&info.ipi6_addr, a.source.data(), 16);
    if (packet::is_ip_multicast(a.destination)) info.ipi6_ifindex = multicast_ifindex;
    std::memcpy(CMSG_DATA(c), &info, sizeof info);
    c = CMSG_NXTHDR(&m, c);
    c->cmsg_level = IPPROTO_IPV6;
    c->cmsg_type = IPV6_TCLASS;
  }
  c->cmsg_len = CMSG_LEN(sizeof(int));
  const int traffic_class = a.traffic_class;
  std::memcpy(CMSG_DATA(c), &traffic_class, sizeof traffic_class);

  p.iovecs[i] = iovec{const_cast<uint8_t*>(payload.data()), payload.size()};
  m.msg_iov = &p.iovecs[i];
  m.msg_iovlen = 1;
  return fd;
}

bool UdpWire::send(std::span<const uint8_t> frame, uint32_t multicast_ifindex) {
  PendingSends& p = pending();
  if (p.count > 0 && p.wire != this) flush(p);
  p.wire = this;
  const int fd = compose(frame, multicast_ifindex, p, p.count);
  if (fd < 0) {
    send_failures_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  p.fds[p.count++] = fd;
  if (t_burst_depth > 0 && p.count < kSendBatch) return true;  // leaves with the burst
  const size_t sending = p.count;
  const uint64_t refused = flush(p);
  // Alone, whether the socket took it is known now.
  return sending > 1 || refused == 0;
}

}  // namespace softverbs
