// The masked ICRC. The variant fields all sit in the first few dozen bytes,
// so the headers are copied to a small stack buffer, masked there, and the
// rest of the frame (the payload, the bulk) is fed to the CRC in place.
#include "emulator/packet/icrc.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "emulator/packet/crc32.h"

namespace softverbs::packet {
namespace {

constexpr size_t kLrhBytes = 8;
constexpr size_t kGrhBytes = 40;
constexpr size_t kBthBytes = 12;
constexpr size_t kIpv4MaxHeaderBytes = 60;
constexpr size_t kIpv6HeaderBytes = 40;
constexpr size_t kUdpHeaderBytes = 8;
constexpr uint8_t kLnhGlobal = 3;

// Offset of resv8a (F, B, reserved) inside the BTH.
constexpr size_t kBthResv8aOffset = 4;

// The CRC state after 8 bytes of ones: where the IB global and RoCEv2 cases
// start, since their (real or notional) LRH counts as all ones.
constexpr uint32_t crc_state_after_ones(int count) {
  uint32_t crc = kCrc32Initial;
  for (int i = 0; i < count; ++i) {
    crc ^= 0xff;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc >> 1) ^ ((crc & 1) ? 0xedb88320u : 0);
    }
  }
  return crc;
}
constexpr uint32_t kStateAfterOnesLrh = crc_state_after_ones(kLrhBytes);

// Copies the first `masked_bytes` of `frame` (or fewer, if it is shorter),
// lets `mask` overwrite variant fields in the copy, and returns the CRC of
// the masked copy followed by the untouched remainder.
template <size_t kCapacity, typename Mask>
uint32_t masked_crc(uint32_t state, std::span<const uint8_t> frame,
                    size_t masked_bytes, Mask mask) {
  std::array<uint8_t, kCapacity> head;
  const size_t head_bytes = std::min({frame.size(), masked_bytes, kCapacity});
  if (head_bytes > 0) std::memcpy(head.data(), frame.data(), head_bytes);
  // Short input: the masks below may touch bytes past its end.
  if (head_bytes < kCapacity) {
    std::memset(head.data() + head_bytes, 0, kCapacity - head_bytes);
  }
  mask(head.data());
  state = crc32_update(state, std::span(head.data(), head_bytes));
  return crc32_final(crc32_update(state, frame.subspan(head_bytes)));
}

void set_ones(uint8_t* p, size_t count) { std::memset(p, 0xff, count); }

// IPv6-layout first word: version(4) traffic class(8) flow label(20); all
// but the version are variant. Same layout in an IB GRH.
void mask_ipv6_like(uint8_t* header) {
  header[0] |= 0x0f;
  set_ones(header + 1, 3);
  header[7] = 0xff;  // hop limit
}

}  // namespace

uint32_t icrc_ib(std::span<const uint8_t> frame) {
  const bool global = frame.size() >= 2 && (frame[1] & 0x3) == kLnhGlobal;
  if (global) {
    if (frame.size() < kLrhBytes) {  // not even a whole LRH: all ones
      std::array<uint8_t, kLrhBytes> ones;
      ones.fill(0xff);
      return crc32(std::span(ones).first(frame.size()));
    }
    // The LRH is all ones: start from the precomputed state after it.
    constexpr size_t kMasked = kGrhBytes + kBthBytes;
    const auto mask_grh_and_bth = [](uint8_t* grh) {
      mask_ipv6_like(grh);
      grh[kGrhBytes + kBthResv8aOffset] = 0xff;
    };
    return masked_crc<kMasked>(kStateAfterOnesLrh, frame.subspan(kLrhBytes),
                               kMasked, mask_grh_and_bth);
  }
  constexpr size_t kMasked = kLrhBytes + kBthBytes;
  const auto mask_lrh_and_bth = [](uint8_t* lrh) {
    lrh[0] |= 0xf0;  // VL
    lrh[kLrhBytes + kBthResv8aOffset] = 0xff;
  };
  return masked_crc<kMasked>(kCrc32Initial, frame, kMasked, mask_lrh_and_bth);
}

uint32_t icrc_roce_v2(std::span<const uint8_t> packet) {
  constexpr size_t kCapacity =
      kIpv4MaxHeaderBytes + kUdpHeaderBytes + kBthBytes;
  const uint8_t version = packet.empty() ? 0 : packet[0] >> 4;
  size_t ip_bytes = 0;
  if (version == 4) {
    ip_bytes = size_t{static_cast<uint8_t>(packet[0] & 0x0f)} * 4;
  } else if (version == 6) {
    ip_bytes = kIpv6HeaderBytes;
  }
  const auto mask_ip_udp_and_bth = [version, ip_bytes](uint8_t* ip) {
    if (version == 4) {
      ip[1] = 0xff;          // type of service
      ip[8] = 0xff;          // time to live
      set_ones(ip + 10, 2);  // header checksum
    } else if (version == 6) {
      mask_ipv6_like(ip);
    }
    uint8_t* udp = ip + ip_bytes;
    set_ones(udp + 6, 2);  // UDP checksum
    udp[kUdpHeaderBytes + kBthResv8aOffset] = 0xff;
  };
  // The notional LRH of ones comes first, as in the IB global case.
  return masked_crc<kCapacity>(kStateAfterOnesLrh, packet,
                               ip_bytes + kUdpHeaderBytes + kBthBytes,
                               mask_ip_udp_and_bth);
}

}  // namespace softverbs::packet
