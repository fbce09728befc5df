// RoCEv2 framing (IBTA annex A17): what an IB global frame (LRH GRH BTH ...
// ICRC) becomes on a UDP/IP network, and back.
//
// On the wire a RoCEv2 packet is IP + UDP (destination port 4791) + BTH ...
// payload pad ICRC: the LRH is gone and the GRH's addresses, traffic class
// and hop limit live in the IP header, IPv4 when both GIDs are IPv4-mapped
// (::ffff:a.b.c.d), else IPv6. The ICRC covers the IP and UDP headers with
// their variant fields masked (icrc.h), so it is recomputed both ways.
//
// A UDP socket neither writes nor shows the IP header, so the ICRC is
// computed over the header the kernel writes for a datagram sent from an
// unconnected socket with path-MTU discovery forced: IPv4 with DF set and
// identification 0, IPv6 with flow label 0. Both ends of the UDP wire send
// that way, and an IPv4 sender that numbers its packets (the kernel's rxe)
// is checked all the same (ipv4_identification.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "emulator/packet/codec.h"
#include "emulator/types.h"

namespace softverbs::packet {

inline constexpr uint16_t kRoceV2UdpPort = 4791;
// Bytes in front of the BTH of a RoCEv2 packet, largest case (IPv6 + UDP):
// the same as LRH + GRH, so either header set fits in front of the other.
inline constexpr size_t kRoceV2MaxHeaderBytes = 48;
static_assert(kRoceV2MaxHeaderBytes == kLrhBytes + kGrhBytes);

// The IP and UDP fields of one RoCEv2 packet that a UDP socket carries
// beside its payload.
struct RoceV2Addressing {
  Gid source{};       // IPv6, or IPv4-mapped
  Gid destination{};
  uint16_t source_port = 0;
  uint16_t destination_port = kRoceV2UdpPort;
  uint8_t traffic_class = 0;  // IPv4 TOS or IPv6 traffic class
  uint8_t hop_limit = 64;     // TTL or hop limit
  // Set by ib_to_roce_v2: the frame's ICRC was wrong (a fault damaged it),
  // so its headers, the DestQP that picks the source port too, are not to
  // be trusted.
  bool damaged = false;
};

bool is_ipv4_mapped(const Gid& gid);
// An IP multicast address: IPv4 224.0.0.0/4 (mapped) or IPv6 ff00::/8.
bool is_ip_multicast(const Gid& gid);
// A loopback address: IPv4 127.0.0.0/8 (mapped) or ::1.
bool is_ip_loopback(const Gid& gid);

// The UDP source port of a flow: RoCEv2 leaves it to the sender as entropy
// for ECMP; one port per destination QP keeps each flow's packets in order.
uint16_t roce_v2_source_port(uint32_t destination_qpn);

// Turns one IB global frame into the UDP payload of a RoCEv2 packet, with
// its ICRC, in `out` (at least frame size + 4 bytes). Returns the payload
// (a view into `out`) and fills `addressing` from the GRH; `addressing`'s
// ports must be set by the caller beforehand. A frame with a wrong ICRC
// gives a packet with a wrong ICRC. Empty when the frame is not a
// global IB frame, or mixes an IPv4-mapped GID with an IPv6 one.
std::span<const uint8_t> ib_to_roce_v2(std::span<const uint8_t> frame,
                                       RoceV2Addressing& addressing, std::span<uint8_t> out);

// How far an IB frame's stored ICRC is off the right one (0: intact).
uint32_t icrc_damage(std::span<const uint8_t> frame);

// The UDP payload of a RoCEv2 packet from the transport part of a frame
// (BTH ... ICRC) and the addressing, into `out`; the ICRC is computed anew
// and then off by `damage` (icrc_damage of the frame it came from, so a
// damaged frame stays damaged). Empty when the GIDs mix IPv4 and IPv6.
std::span<const uint8_t> transport_to_roce_v2(std::span<const uint8_t> transport,
                                              uint32_t damage,
                                              const RoceV2Addressing& addressing,
                                              std::span<uint8_t> out);

// Makes the ICRC of an IPv4 RoCEv2 UDP payload (from ib_to_roce_v2) right
// for a packet whose IPv4 identification is `identification` rather than 0;
// doing it twice undoes it. The kernel numbers the segments of a UDP GSO
// send 0, 1, 2...
void toggle_ipv4_identification(std::span<uint8_t> udp_payload, uint16_t identification);

// Checks the ICRC of a received RoCEv2 UDP payload and turns it into an IB
// global frame in `out` (at least payload size + kRoceV2MaxHeaderBytes
// bytes), LIDs 0. Returns kNone and sets `frame` to it, or kTruncated (too
// short, or not whole 4-byte words), kBadIcrc.
DecodeError roce_v2_to_ib(const RoceV2Addressing& addressing,
                          std::span<const uint8_t> udp_payload, std::span<uint8_t> out,
                          std::span<const uint8_t>& frame);

}  // namespace softverbs::packet
