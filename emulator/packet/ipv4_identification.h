// A UDP socket does not show the IP header of what it receives, yet a
// RoCEv2 ICRC covers the IPv4 identification field, which most senders set
// to 0 for a don't-fragment datagram but some (the kernel's rxe) number.
// The CRC is linear, so the ICRC of the same packet with another
// identification differs from the one computed with 0 by a linear function
// of the 16 identification bits: whether some identification explains the
// received ICRC is a 32x16 linear system over GF(2). A packet changed
// anywhere else still fails, unless the change happens to look like one of
// the 2^16 identifications (odds 2^-16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace softverbs::packet {

// For a packet of `covered` bytes (what icrc_roce_v2() covers) whose
// identification (16 bits, big-endian at `identification_offset`) was
// taken as 0: true when some value of it explains `difference`, the
// received ICRC XOR the one computed.
bool ipv4_identification_explains(size_t covered, size_t identification_offset,
                                  uint32_t difference);

// What the ICRC of a `covered`-byte packet changes by (XOR) when its
// identification, at `identification_offset`, is `identification` instead
// of 0.
uint32_t ipv4_identification_icrc_change(size_t covered, size_t identification_offset,
                                         uint16_t identification);

}  // namespace softverbs::packet
