// RoCEv2 <-> IB global frames. Both directions build the IP and UDP headers
// a receiver would see in front of the BTH, because the ICRC covers them;
// only the payload is copied, once.
#include "emulator/packet/roce_v2.h"

#include <cstring>

#include "emulator/packet/byte_order.h"
#include "emulator/packet/icrc.h"
#include "emulator/packet/ipv4_identification.h"

namespace softverbs::packet {
namespace {

using namespace wire_order;

constexpr size_t kIpv4HeaderBytes = 20;
constexpr size_t kIpv6HeaderBytes = 40;
constexpr size_t kUdpHeaderBytes = 8;
constexpr uint8_t kIpProtocolUdp = 17;
constexpr uint16_t kIpv4DontFragment = 0x4000;
constexpr uint8_t kLnhGlobal = 3;
constexpr uint8_t kGrhNextHeaderIbaTransport = 0x1b;
// Offsets inside an IB frame: LRH byte 1 (LNH), the GRH's fields.
constexpr size_t kLrhLnhByte = 1;
constexpr size_t kGrhOffset = kLrhBytes;
constexpr size_t kBthOffset = kLrhBytes + kGrhBytes;
// Where an IPv4 header keeps its identification.
constexpr size_t kIpv4IdentificationOffset = 4;

size_t ip_header_bytes(bool ipv4) { return ipv4 ? kIpv4HeaderBytes : kIpv6HeaderBytes; }

// Writes the IP and UDP headers that end exactly at `bth` and carry
// `udp_payload_bytes` after them; returns where they start.
uint8_t* put_ip_udp_headers(uint8_t* bth, const RoceV2Addressing& a, bool ipv4,
                            size_t udp_payload_bytes) {
  uint8_t* udp = bth - kUdpHeaderBytes;
  uint8_t* ip = udp - ip_header_bytes(ipv4);
  const size_t udp_bytes = kUdpHeaderBytes + udp_payload_bytes;
  if (ipv4) {
    ip[0] = 0x45;  // version 4, five words
    ip[1] = a.traffic_class;
    store_be16(ip + 2, static_cast<uint16_t>(kIpv4HeaderBytes + udp_bytes));
    store_be16(ip + kIpv4IdentificationOffset, 0);
    store_be16(ip + 6, kIpv4DontFragment);
    ip[8] = a.hop_limit;
    ip[9] = kIpProtocolUdp;
    store_be16(ip + 10, 0);  // checksum: masked
    std::memcpy(ip + 12, a.source.data() + 12, 4);
    std::memcpy(ip + 16, a.destination.data() + 12, 4);
  } else {
    store_be32(ip, uint32_t{6} << 28 | uint32_t{a.traffic_class} << 20);
    store_be16(ip + 4, static_cast<uint16_t>(udp_bytes));
    ip[6] = kIpProtocolUdp;
    ip[7] = a.hop_limit;
    std::memcpy(ip + 8, a.source.data(), a.source.size());
    std::memcpy(ip + 24, a.destination.data(), a.destination.size());
  }
  store_be16(udp, a.source_port);
  store_be16(udp + 2, a.destination_port);
  store_be16(udp + 4, static_cast<uint16_t>(udp_bytes));
  store_be16(udp + 6, 0);  // checksum: masked
  return ip;
}

void put_lrh_and_grh(uint8_t* frame, const RoceV2Addressing& a, size_t after_grh_bytes) {
  // LRH (codec.cc has the layout): VL, LVer, SL and both LIDs 0.
  frame[0] = 0;
  frame[1] = kLnhGlobal;
  store_be16(frame + 2, 0);
  store_be16(frame + 4, static_cast<uint16_t>((kLrhBytes + kGrhBytes + after_grh_bytes) / 4));
  store_be16(frame + 6, 0);
  Grh grh;
  grh.traffic_class = a.traffic_class;
  grh.hop_limit = a.hop_limit;
  grh.pay_len = static_cast<uint16_t>(after_grh_bytes);
  grh.sgid = a.source;
  grh.dgid = a.destination;
  encode_grh(grh, std::span<uint8_t, kGrhBytes>(frame + kGrhOffset, kGrhBytes));
}

}  // namespace

bool is_ipv4_mapped(const Gid& gid) {
  static constexpr uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.data(), kPrefix, sizeof kPrefix) == 0;
}

bool is_ip_multicast(const Gid& gid) {
  return is_ipv4_mapped(gid) ? (gid[12] & 0xf0) == 0xe0 : gid[0] == 0xff;
}

bool is_ip_loopback(const Gid& gid) {
  if (is_ipv4_mapped(gid)) return gid[12] == 127;
  static constexpr Gid kIpv6Loopback{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  return gid == kIpv6Loopback;
}

uint16_t roce_v2_source_port(uint32_t destination_qpn) {
  // The upper quarter of the port space (49152-65535, the dynamic ports),
  // 14 bits of a multiplicative hash of the QPN.
  constexpr uint32_t kGoldenRatio32 = 0x61c88647;
  const uint32_t hash = (destination_qpn * kGoldenRatio32) >> (32 - 14);
  return static_cast<uint16_t>(0xc000 | hash);
}

std::span<const uint8_t> ib_to_roce_v2(std::span<const uint8_t> frame,
                                       RoceV2Addressing& addressing, std::span<uint8_t> out) {
  if (frame.size() < kBthOffset + kBthBytes + kIcrcBytes) return {};
  if ((frame[kLrhLnhByte] & 0x3) != kLnhGlobal) return {};
  const uint8_t* g = frame.data() + kGrhOffset;
  if (g[6] != kGrhNextHeaderIbaTransport) return {};
  std::memcpy(addressing.source.data(), g + 8, 16);
  std::memcpy(addressing.destination.data(), g + 24, 16);
  addressing.traffic_class = static_cast<uint8_t>((g[0] & 0x0f) << 4 | g[1] >> 4);
  const uint32_t damage = icrc_damage(frame);
  addressing.damaged = damage != 0;
  return transport_to_roce_v2(frame.subspan(kBthOffset), damage, addressing, out);
}

uint32_t icrc_damage(std::span<const uint8_t> frame) {
  if (frame.size() < kIcrcBytes) return 0;
  return load_icrc(frame.data() + frame.size() - kIcrcBytes) ^
         icrc_ib(frame.first(frame.size() - kIcrcBytes));
}

std::span<const uint8_t> transport_to_roce_v2(std::span<const uint8_t> transport,
                                              uint32_t damage,
                                              const RoceV2Addressing& addressing,
                                              std::span<uint8_t> out) {
  const bool ipv4 = is_ipv4_mapped(addressing.source);
  if (ipv4 != is_ipv4_mapped(addressing.destination)) return {};
  if (transport.size() < kBthBytes + kIcrcBytes) return {};
  const size_t payload_bytes = transport.size();  // BTH .. ICRC
  const size_t headers = ip_header_bytes(ipv4) + kUdpHeaderBytes;
  if (out.size() < headers + payload_bytes) return {};
  uint8_t* bth = out.data() + headers;
  std::memcpy(bth, transport.data(), payload_bytes - kIcrcBytes);
  uint8_t* ip = put_ip_udp_headers(bth, addressing, ipv4, payload_bytes);
  const size_t covered = headers + payload_bytes - kIcrcBytes;
  store_icrc(bth + payload_bytes - kIcrcBytes, icrc_roce_v2(std::span(ip, covered)) ^ damage);
  return std::span<const uint8_t>(bth, payload_bytes);
}

void toggle_ipv4_identification(std::span<uint8_t> udp_payload, uint16_t identification) {
  if (udp_payload.size() < kBthBytes + kIcrcBytes) return;
  const size_t covered = kIpv4HeaderBytes + kUdpHeaderBytes + udp_payload.size() - kIcrcBytes;
  uint8_t* icrc = udp_payload.data() + udp_payload.size() - kIcrcBytes;
  store_icrc(icrc, load_icrc(icrc) ^ ipv4_identification_icrc_change(
                                         covered, kIpv4IdentificationOffset, identification));
}

DecodeError roce_v2_to_ib(const RoceV2Addressing& addressing,
                          std::span<const uint8_t> udp_payload, std::span<uint8_t> out,
                          std::span<const uint8_t>& frame) {
  const size_t n = udp_payload.size();
  if (n < kBthBytes + kIcrcBytes || n % 4 != 0) return DecodeError::kTruncated;
  if (out.size() < kRoceV2MaxHeaderBytes + n) return DecodeError::kTruncated;
  const bool ipv4 = is_ipv4_mapped(addressing.source) && is_ipv4_mapped(addressing.destination);

  // The IP and UDP headers go right in front of the copied payload, where
  // the LRH and GRH will stand once the ICRC is checked.
  uint8_t* bth = out.data() + kRoceV2MaxHeaderBytes;
  std::memcpy(bth, udp_payload.data(), n);
  uint8_t* ip = put_ip_udp_headers(bth, addressing, ipv4, n);
  const size_t covered = static_cast<size_t>(bth - ip) + n - kIcrcBytes;
  const uint32_t difference =
      load_icrc(bth + n - kIcrcBytes) ^ icrc_roce_v2(std::span(ip, covered));
  if (difference != 0 &&
      !(ipv4 && ipv4_identification_explains(covered, kIpv4IdentificationOffset, difference)))
    return DecodeError::kBadIcrc;

  put_lrh_and_grh(out.data(), addressing, n);
  const size_t size = kRoceV2MaxHeaderBytes + n;
  store_icrc(out.data() + size - kIcrcBytes,
             icrc_ib(std::span<const uint8_t>(out.data(), size - kIcrcBytes)));
  frame = std::span<const uint8_t>(out.data(), size);
  return DecodeError::kNone;
}

}  // namespace softverbs::packet
