// The IBTA invariant CRC (ICRC, IBTA 7.8.1; RoCEv2: Annex A17.3.3): a CRC-32
// over the parts of a packet that no switch or router may change, computed
// as if every variant field were all ones.
//
// Variant fields, by frame kind:
//  - IB local (LRH BTH ...): the LRH's VL; the BTH's resv8a byte (F, B and
//    the six reserved bits that follow them).
//  - IB global (LRH GRH BTH ...): the whole LRH (a router rewrites it); the
//    GRH's traffic class, flow label and hop limit; the BTH's resv8a byte.
//  - RoCEv2 (IP UDP BTH ...): 8 bytes of ones stand where an LRH would be;
//    IPv4 TOS, TTL and header checksum, or IPv6 traffic class, flow label
//    and hop limit; the UDP checksum; the BTH's resv8a byte.
//
// The ICRC covers everything from the start of the frame through the last
// pad byte. Like Ethernet's FCS it goes on the wire least significant byte
// first (what rxe and ConnectX NICs put there); store_icrc/load_icrc do that.
#pragma once

#include <cstdint>
#include <span>

namespace softverbs::packet {

// ICRC of an IB frame: `frame` runs from the first LRH byte through the last
// pad byte (the ICRC itself excluded). The frame kind comes from the LRH's
// LNH (3: GRH present). Safe on any input: fields past the end of a short
// `frame` are simply absent.
uint32_t icrc_ib(std::span<const uint8_t> frame);

// ICRC of a RoCEv2 packet: `packet` runs from the first byte of the IPv4 or
// IPv6 header (chosen by its version nibble) through the last pad byte; UDP
// and BTH follow the IP header. An IPv4 header's length comes from its IHL.
// Safe on any input; a version other than 4 or 6 masks no IP field.
uint32_t icrc_roce_v2(std::span<const uint8_t> packet);

// The ICRC's 4 bytes on the wire, least significant first.
inline void store_icrc(uint8_t* dst, uint32_t icrc) {
  dst[0] = static_cast<uint8_t>(icrc);
  dst[1] = static_cast<uint8_t>(icrc >> 8);
  dst[2] = static_cast<uint8_t>(icrc >> 16);
  dst[3] = static_cast<uint8_t>(icrc >> 24);
}

inline uint32_t load_icrc(const uint8_t* src) {
  return uint32_t{src[0]} | uint32_t{src[1]} << 8 | uint32_t{src[2]} << 16 |
         uint32_t{src[3]} << 24;
}

}  // namespace softverbs::packet
