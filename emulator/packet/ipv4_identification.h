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

// `packet` is what icrc_roce_v2() covers, with the identification (16 bits,
// big-endian at `identification_offset`) set to 0. True when some value of
// it would make icrc_roce_v2() equal `received_icrc`.
bool ipv4_identification_explains(std::span<const uint8_t> packet,
                                  size_t identification_offset, uint32_t received_icrc);

}  // namespace softverbs::packet
