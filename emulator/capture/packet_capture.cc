#include "emulator/capture/packet_capture.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "emulator/host/device_config.h"
#include "emulator/packet/byte_order.h"
#include "emulator/packet/codec.h"
#include "emulator/packet/frame_fields.h"
#include "emulator/packet/roce_v2.h"
#include "emulator/same_host/placed_send.h"
#include "emulator/same_host/run_frame.h"

namespace softverbs::capture {
namespace {

using namespace packet::wire_order;
using fault::Direction;
using fault::FrameFate;

constexpr size_t kEthernetHeaderBytes = 14;
constexpr size_t kIpv4HeaderBytes = 20;
constexpr size_t kIpv6HeaderBytes = 40;
constexpr size_t kUdpHeaderBytes = 8;
constexpr uint16_t kEtherTypeIpv4 = 0x0800;
constexpr uint16_t kEtherTypeIpv6 = 0x86dd;
constexpr uint8_t kIpProtocolUdp = 17;
constexpr uint8_t kHopLimit = 64;

uint16_t ones_complement_sum(uint32_t sum, std::span<const uint8_t> bytes) {
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) sum += uint32_t{bytes[i]} << 8 | bytes[i + 1];
  if (bytes.size() % 2) sum += uint32_t{bytes.back()} << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(sum);
}

// A locally administered MAC made from the last four bytes of an address.
void put_mac(uint8_t* p, const Gid& address) {
  p[0] = 0x02;
  p[1] = 0x00;
  std::memcpy(p + 2, address.data() + 12, 4);
}

// The GID of the port that has `lid`, or fe80::<lid> for a LID no soft
// port has.
Gid gid_of_lid(uint16_t lid) {
  if (const DeviceDescription* d = find_device_by_lid(lid))
    if (uint8_t port = d->port_of_lid(lid)) return d->gids_of(port).front().gid;
  Gid gid{0xfe, 0x80};
  store_be16(gid.data() + 14, lid);
  return gid;
}

// Ethernet, IP and UDP around the RoCEv2 form of `frame`.
bool roce_packet_of(std::span<const uint8_t> frame, std::vector<uint8_t>& out) {
  packet::RoceV2Addressing a;
  a.source_port = packet::roce_v2_source_port(packet::frame_dest_qp(frame));
  a.hop_limit = kHopLimit;
  std::vector<uint8_t> converted(frame.size() + packet::kRoceV2MaxHeaderBytes);
  std::span<const uint8_t> payload;
  if (packet::frame_is_global(frame)) {
    payload = packet::ib_to_roce_v2(frame, a, converted);
  } else {
    a.source = gid_of_lid(load_be16(frame.data() + 6));
    a.destination = gid_of_lid(load_be16(frame.data() + 2));
    payload = packet::transport_to_roce_v2(frame.subspan(packet::kLrhBytes),
                                           packet::icrc_damage(frame), a, converted);
  }
  if (payload.empty()) return false;
  const bool ipv4 = packet::is_ipv4_mapped(a.source);
  const size_t ip_bytes = ipv4 ? kIpv4HeaderBytes : kIpv6HeaderBytes;
  const size_t udp_bytes = kUdpHeaderBytes + payload.size();
  out.assign(kEthernetHeaderBytes + ip_bytes + udp_bytes, 0);
  uint8_t* eth = out.data();
  put_mac(eth, a.destination);
  put_mac(eth + 6, a.source);
  store_be16(eth + 12, ipv4 ? kEtherTypeIpv4 : kEtherTypeIpv6);
  uint8_t* ip = eth + kEthernetHeaderBytes;
  uint8_t* udp = ip + ip_bytes;
  if (ipv4) {
    // As the kernel sends from an unconnected socket with DF: identification 0.
    ip[0] = 0x45;
    ip[1] = a.traffic_class;
    store_be16(ip + 2, static_cast<uint16_t>(ip_bytes + udp_bytes));
    store_be16(ip + 6, 0x4000);
    ip[8] = kHopLimit;
    ip[9] = kIpProtocolUdp;
    std::memcpy(ip + 12, a.source.data() + 12, 4);
    std::memcpy(ip + 16, a.destination.data() + 12, 4);
    store_be16(ip + 10, static_cast<uint16_t>(~ones_complement_sum(0, std::span(ip, ip_bytes))));
  } else {
    store_be32(ip, uint32_t{6} << 28 | uint32_t{a.traffic_class} << 20);
    store_be16(ip + 4, static_cast<uint16_t>(udp_bytes));
    ip[6] = kIpProtocolUdp;
    ip[7] = kHopLimit;
    std::memcpy(ip + 8, a.source.data(), 16);
    std::memcpy(ip + 24, a.destination.data(), 16);
  }
  store_be16(udp, a.source_port);
  store_be16(udp + 2, packet::kRoceV2UdpPort);
  store_be16(udp + 4, static_cast<uint16_t>(udp_bytes));
  std::memcpy(udp + kUdpHeaderBytes, payload.data(), payload.size());
  if (!ipv4) {
    // IPv6 makes the UDP checksum mandatory: over a pseudo-header of the
    // addresses, the length and the protocol, then the datagram.
    uint32_t sum = ones_complement_sum(0, std::span(ip + 8, 32));
    sum += static_cast<uint32_t>(udp_bytes) + kIpProtocolUdp;
    const uint16_t checksum =
        static_cast<uint16_t>(~ones_complement_sum(sum, std::span(udp, udp_bytes)));
    store_be16(udp + 6, checksum == 0 ? 0xffff : checksum);
  }
  return true;
}

const char* comment_for(Direction direction, FrameFate fate) {
  const bool tx = direction == Direction::kTx;
  switch (fate) {
    case FrameFate::kPassed: return "";
    case FrameFate::kDropped:
      return tx ? "dropped by the fault plan: never sent"
                : "dropped by the fault plan on arrival: never delivered";
    case FrameFate::kDuplicate: return "a duplicate made by the fault plan";
    case FrameFate::kCorrupted: return "corrupted by the fault plan: one bit flipped";
    case FrameFate::kHeld: return "";
    case FrameFate::kReleased: return "delayed or reordered by the fault plan";
  }
  return "";
}

uint64_t realtime_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// FILE with -<pid> before its extension: for a second process of the
// program (a child it forked), FILE being the first's.
std::string path_with_pid(const std::string& path) {
  const size_t slash = path.rfind('/');
  size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) dot = path.size();
  return path.substr(0, dot) + "-" + std::to_string(getpid()) + path.substr(dot);
}

}  // namespace

bool network_packet_of(std::span<const uint8_t> frame, std::vector<uint8_t>& out) {
  // Runs and placed SENDs are frames of the shared-memory wire, not packets
  // (a capture keeps both from being made; one already on its way is left out).
  if (frame.size() < packet::kLrhBytes + packet::kBthBytes + packet::kIcrcBytes ||
      is_run_frame(frame) || is_placed_send_frame(frame))
    return false;
  return roce_packet_of(frame, out);
}

bool parse_qp_list(std::string_view text, std::vector<uint32_t>& qpns) {
  const std::string copy(text);
  for (const char* p = copy.c_str(); *p;) {
    char* end = nullptr;
    const unsigned long qpn = std::strtoul(p, &end, 0);
    if (end == p || qpn > 0xffffff || (*end && *end != ',') || (*end == ',' && !end[1]))
      return false;
    qpns.push_back(static_cast<uint32_t>(qpn));
    p = *end ? end + 1 : end;
  }
  return !qpns.empty();
}

bool find_device_index(std::string_view name, int& index) {
  for (const DeviceDescription& d : configured_devices())
    if (d.name == name) index = static_cast<int>(d.index);
  return index >= 0;
}

bool parse_limit_mib(std::string_view text, uint64_t& mib) {
  const std::string copy(text);
  char* end = nullptr;
  mib = std::strtoull(copy.c_str(), &end, 10);
  return !copy.empty() && *end == '\0' && mib != 0 && mib <= (UINT64_MAX >> 20);
}

std::unique_ptr<PacketCapture> PacketCapture::open(const CaptureSettings& settings,
                                                   std::string& error) {
  std::string path = settings.path;
  Errno err = 0;
  auto file = PcapngFile::create(path, settings.limit_mib << 20, err);
  if (!file && err == EEXIST) {
    path = path_with_pid(settings.path);
    file = PcapngFile::create(path, settings.limit_mib << 20, err);
  }
  if (!file) {
    error = "cannot write the capture file " + path + ": " + std::strerror(err);
    return nullptr;
  }
  return std::make_unique<PacketCapture>(path, std::move(file), settings.filter);
}

std::unique_ptr<PacketCapture> PacketCapture::from_environment(std::string& error) {
  error.clear();
  const char* path = std::getenv("SOFTVERBS_CAPTURE");
  if (!path || !*path) return nullptr;
  CaptureSettings settings;
  settings.path = path;
  if (const char* qps = std::getenv("SOFTVERBS_CAPTURE_QP"); qps && *qps) {
    if (!parse_qp_list(qps, settings.filter.qpns)) {
      error = std::string("SOFTVERBS_CAPTURE_QP='") + qps +
              "' is not a list of QP numbers (24 bits each, e.g. 0x12,19)";
      return nullptr;
    }
  }
  if (const char* device = std::getenv("SOFTVERBS_CAPTURE_DEVICE"); device && *device) {
    if (!find_device_index(device, settings.filter.device_index)) {
      error = std::string("SOFTVERBS_CAPTURE_DEVICE='") + device +
              "' names no soft device (softverbs devices lists them)";
      return nullptr;
    }
  }
  if (const char* limit = std::getenv("SOFTVERBS_CAPTURE_LIMIT_MB"); limit && *limit) {
    if (!parse_limit_mib(limit, settings.limit_mib)) {
      error = std::string("SOFTVERBS_CAPTURE_LIMIT_MB='") + limit + "' is not a size in MiB";
      return nullptr;
    }
  }
  return open(settings, error);
}

bool PacketCapture::wanted(std::span<const uint8_t> frame) const {
  if (!filter_.qpns.empty() &&
      std::find(filter_.qpns.begin(), filter_.qpns.end(), packet::frame_dest_qp(frame)) ==
          filter_.qpns.end())
    return false;
  if (filter_.device_index < 0) return true;
  const DeviceDescription* source = nullptr;
  const DeviceDescription* destination = nullptr;
  if (packet::frame_is_global(frame)) {
    source = find_device_by_gid(packet::frame_sgid(frame));
    destination = find_device_by_gid(packet::frame_dgid(frame));
  } else {
    source = find_device_by_lid(load_be16(frame.data() + 6));
    destination = find_device_by_lid(load_be16(frame.data() + 2));
  }
  const auto is_filtered = [&](const DeviceDescription* d) {
    return d && static_cast<int>(d->index) == filter_.device_index;
  };
  return is_filtered(source) || is_filtered(destination);
}

void PacketCapture::observe(Direction direction, std::span<const uint8_t> frame,
                            FrameFate fate) {
  if (fate == FrameFate::kHeld) return;  // written when it goes on
  if (frame.size() < packet::kLrhBytes + packet::kBthBytes || !wanted(frame)) return;
  thread_local std::vector<uint8_t> packet_bytes;
  if (!network_packet_of(frame, packet_bytes)) return;
  file_->write(realtime_ns(), direction == Direction::kTx, packet_bytes,
               comment_for(direction, fate));
}

}  // namespace softverbs::capture
