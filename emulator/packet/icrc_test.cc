// CRC-32 engine and the IBTA ICRC masking (IBTA 7.8.1; RoCEv2 Annex A17).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>
#include <vector>

#include "emulator/packet/crc32.h"
#include "emulator/packet/crc32_engines.h"
#include "emulator/packet/icrc.h"
#include "emulator/packet/packet_test_support.h"

namespace softverbs::packet {
namespace {

using testing::reference_crc32;
using Bytes = std::vector<uint8_t>;

Bytes random_bytes(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes bytes(count);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes all;
  for (const Bytes& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

Bytes sequence(uint8_t first, size_t count) {
  Bytes bytes(count);
  for (size_t i = 0; i < count; ++i) bytes[i] = static_cast<uint8_t>(first + i);
  return bytes;
}

// ---- CRC-32 engine -------------------------------------------------------

TEST(Crc32, StandardCheckValue) {
  const char* check = "123456789";
  EXPECT_EQ(crc32(std::span(reinterpret_cast<const uint8_t*>(check), 9)),
            0xcbf43926u);
  EXPECT_EQ(crc32({}), 0u);
}

TEST(Crc32, MatchesBitwiseReferenceAtEveryLengthAndAlignment) {
  const Bytes data = random_bytes(600, 1);
  for (size_t start = 0; start < 16; ++start) {
    for (size_t length = 0; start + length <= 300; ++length) {
      const auto slice = std::span(data).subspan(start, length);
      ASSERT_EQ(crc32(slice), reference_crc32(slice))
          << "start " << start << " length " << length;
    }
  }
}

// Both engines, whichever one this CPU makes crc32_update() use, on lengths
// around every folding boundary and at every alignment.
void expect_engine_matches_reference(
    uint32_t (*engine)(uint32_t, const uint8_t*, size_t)) {
  const Bytes data = random_bytes(5000, 3);
  for (size_t start = 0; start < 16; ++start) {
    for (size_t length : {0, 1, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129,
                          191, 192, 255, 256, 1000, 4096, 4100, 4983}) {
      if (start + length > data.size()) continue;
      const auto slice = std::span(data).subspan(start, length);
      for (uint32_t state : {0xffffffffu, 0u, 0x12345678u}) {
        ASSERT_EQ(engine(state, slice.data(), slice.size()),
                  testing::reference_crc32_update(state, slice))
            << "start " << start << " length " << length << " state " << state;
      }
    }
  }
}

TEST(Crc32, TableEngineMatchesReference) {
  expect_engine_matches_reference(crc32_engines::table_update);
}

TEST(Crc32, CarrylessMultiplyEngineMatchesReference) {
  if (!crc32_engines::clmul_available()) {
    GTEST_SKIP() << "no PCLMULQDQ on this CPU";
  }
  expect_engine_matches_reference(crc32_engines::clmul_update);
}

TEST(Crc32, IncrementalUpdatesEqualOneShot) {
  const Bytes data = random_bytes(257, 2);
  const uint32_t whole = crc32(data);
  for (size_t split = 0; split <= data.size(); ++split) {
    uint32_t state = crc32_update(kCrc32Initial, std::span(data).first(split));
    state = crc32_update(state, std::span(data).subspan(split));
    ASSERT_EQ(crc32_final(state), whole) << split;
  }
}

// The IB global and RoCEv2 cases start with 8 bytes of ones; rxe writes the
// resulting CRC state as its ICRC seed, 0xdebb20e3.
TEST(Crc32, StateAfterEightBytesOfOnes) {
  const Bytes ones(8, 0xff);
  EXPECT_EQ(crc32_update(kCrc32Initial, ones), 0xdebb20e3u);
}

// ---- ICRC masking: a test-side model of IBTA 7.8.1 -----------------------

struct BitRange {
  size_t byte;
  uint8_t mask;
};

// Variant bits of an IB frame by kind; everything else is invariant.
std::vector<BitRange> ib_variant_bits(bool global) {
  if (!global) return {{0, 0xf0}, {8 + 4, 0xff}};  // VL; BTH resv8a
  std::vector<BitRange> bits;
  for (size_t i = 0; i < 8; ++i) bits.push_back({i, 0xff});  // LRH
  bits.push_back({8, 0x0f});                                  // TClass high
  for (size_t i = 9; i < 12; ++i) bits.push_back({i, 0xff});  // TClass, flow
  bits.push_back({8 + 7, 0xff});                              // HopLmt
  bits.push_back({48 + 4, 0xff});                             // BTH resv8a
  return bits;
}

std::vector<BitRange> roce_variant_bits(bool ipv6, size_t ipv4_header_bytes) {
  if (ipv6) {
    return {{0, 0x0f}, {1, 0xff}, {2, 0xff}, {3, 0xff}, {7, 0xff},
            {46, 0xff}, {47, 0xff}, {48 + 4, 0xff}};
  }
  const size_t udp = ipv4_header_bytes;
  return {{1, 0xff},       {8, 0xff},       {10, 0xff},          {11, 0xff},
          {udp + 6, 0xff}, {udp + 7, 0xff}, {udp + 8 + 4, 0xff}};
}

uint8_t variant_mask_at(const std::vector<BitRange>& bits, size_t byte) {
  uint8_t mask = 0;
  for (const BitRange& range : bits) {
    if (range.byte == byte) mask |= range.mask;
  }
  return mask;
}

// The ICRC computed from the definition: ones over variant bits (only those
// inside `bytes`), an optional prefix of ones, then a plain CRC-32.
uint32_t model_icrc(std::span<const uint8_t> bytes,
                    const std::vector<BitRange>& variant, size_t ones_prefix) {
  Bytes masked(ones_prefix, 0xff);
  masked.insert(masked.end(), bytes.begin(), bytes.end());
  for (const BitRange& range : variant) {
    if (range.byte < bytes.size()) masked[ones_prefix + range.byte] |= range.mask;
  }
  return reference_crc32(masked);
}

// Every invariant bit changes the ICRC; every variant bit leaves it alone.
template <typename Icrc>
void expect_exact_coverage(const Bytes& frame,
                           const std::vector<BitRange>& variant, Icrc icrc) {
  const uint32_t original = icrc(frame);
  for (size_t byte = 0; byte < frame.size(); ++byte) {
    const uint8_t variant_mask = variant_mask_at(variant, byte);
    for (int bit = 0; bit < 8; ++bit) {
      Bytes flipped = frame;
      flipped[byte] ^= static_cast<uint8_t>(1u << bit);
      const bool is_variant = variant_mask & (1u << bit);
      EXPECT_EQ(icrc(flipped) == original, is_variant)
          << "byte " << byte << " bit " << bit;
    }
  }
}

// An RC RDMA WRITE FIRST, IB local, assembled by hand (see codec_test.cc
// for the field values). The expected ICRC was computed separately as
// zlib.crc32 of these bytes with byte 0 |= 0xf0 and byte 12 = 0xff.
const Bytes kLocalWriteFirst = {
    0xa0, 0x72, 0x12, 0x34, 0x00, 0x0c, 0xbe, 0xef,              // LRH
    0x06, 0xb0, 0x80, 0x01, 0x80, 0xab, 0xcd, 0xef,              // BTH
    0x80, 0x12, 0x34, 0x56,                                      //
    0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,              // RETH
    0x11, 0x22, 0x33, 0x44, 0x00, 0x01, 0x00, 0x00,              //
    0xde, 0xad, 0xbe, 0xef, 0x42, 0x00, 0x00, 0x00,              // data, pad
};
constexpr uint32_t kLocalWriteFirstIcrc = 0xc9d46eb1;

// A UD SEND ONLY WITH IMMEDIATE, IB global. Expected ICRC: zlib.crc32 with
// bytes 0-7 = 0xff, byte 8 |= 0x0f, bytes 9-11 and 15 = 0xff, byte 52 = 0xff.
const Bytes kGlobalUdSendImm = concat({
    {0x30, 0x13, 0x00, 0x07, 0x00, 0x15, 0x00, 0x09},  // LRH
    {0x6a, 0x51, 0x23, 0x45, 0x00, 0x24, 0x1b, 0x40},  // GRH
    sequence(0x10, 16), sequence(0x20, 16),            // SGID, DGID
    {0x65, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x2a,   // BTH
     0x00, 0x00, 0x00, 0x07},
    {0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02},  // DETH
    {0x01, 0x02, 0x03, 0x04},                          // ImmDt
    {'p', 'a', 'y', 'l', 'o', 'a', 'd', '!'},
});
constexpr uint32_t kGlobalUdSendImmIcrc = 0x48bd31ad;

TEST(IcrcIb, LocalFixedVector) {
  EXPECT_EQ(icrc_ib(kLocalWriteFirst), kLocalWriteFirstIcrc);
  EXPECT_EQ(icrc_ib(kLocalWriteFirst),
            model_icrc(kLocalWriteFirst, ib_variant_bits(false), 0));
}

TEST(IcrcIb, GlobalFixedVector) {
  EXPECT_EQ(icrc_ib(kGlobalUdSendImm), kGlobalUdSendImmIcrc);
  EXPECT_EQ(icrc_ib(kGlobalUdSendImm),
            model_icrc(kGlobalUdSendImm, ib_variant_bits(true), 0));
}

// IBTA 7.8.1: for a local packet only the VL of the LRH is variant.
TEST(IcrcIb, LocalCoversEverythingButVlAndResv8a) {
  expect_exact_coverage(kLocalWriteFirst, ib_variant_bits(false),
                        [](const Bytes& f) { return icrc_ib(f); });
}

// IBTA 7.8.1: a global packet's LRH is replaced at each router, so none of
// it is covered; in the GRH, TClass, FlowLabel and HopLmt are variant. The
// LNH bits are the exception: they decide the frame kind itself.
TEST(IcrcIb, GlobalCoversNeitherLrhNorGrhRoutingFields) {
  std::vector<BitRange> variant = ib_variant_bits(true);
  Bytes frame = kGlobalUdSendImm;
  const uint32_t original = icrc_ib(frame);
  for (size_t byte = 0; byte < frame.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      if (byte == 1 && bit < 2) continue;  // LNH: changes the frame kind
      Bytes flipped = frame;
      flipped[byte] ^= static_cast<uint8_t>(1u << bit);
      const bool is_variant = variant_mask_at(variant, byte) & (1u << bit);
      EXPECT_EQ(icrc_ib(flipped) == original, is_variant)
          << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(IcrcIb, MatchesTheModelOnRandomFramesOfBothKinds) {
  for (uint32_t seed = 0; seed < 200; ++seed) {
    Bytes frame = random_bytes(seed % 97, seed);
    const bool global = seed % 2;
    if (frame.size() >= 2) frame[1] = (frame[1] & ~3) | (global ? 3 : 2);
    EXPECT_EQ(icrc_ib(frame),
              model_icrc(frame, ib_variant_bits(global && frame.size() >= 2), 0))
        << seed;
  }
}

// Short inputs (a decoder may hand anything over): masks apply to the bytes
// that exist, nothing outside `frame` is read.
TEST(IcrcIb, EveryPrefixOfAFrameMatchesTheModel) {
  for (const Bytes* frame : {&kLocalWriteFirst, &kGlobalUdSendImm}) {
    for (size_t length = 0; length <= frame->size(); ++length) {
      const Bytes prefix(frame->begin(), frame->begin() + length);
      const bool global = length >= 2 && (prefix[1] & 3) == 3;
      EXPECT_EQ(icrc_ib(prefix), model_icrc(prefix, ib_variant_bits(global), 0))
          << length;
    }
  }
}

TEST(IcrcIb, StoredLeastSignificantByteFirst) {
  uint8_t bytes[4];
  store_icrc(bytes, 0x2a00fd82);
  EXPECT_EQ(bytes[0], 0x82);
  EXPECT_EQ(bytes[1], 0xfd);
  EXPECT_EQ(bytes[2], 0x00);
  EXPECT_EQ(bytes[3], 0x2a);
  EXPECT_EQ(load_icrc(bytes), 0x2a00fd82u);
}

// ---- RoCEv2 --------------------------------------------------------------

// A CNP (opcode 0x81) captured from a Mellanox ConnectX-4 Lx NIC, from its IP
// header on, as published with a packet-dissector regression suite; its
// last four bytes are the ICRC the NIC computed.
const Bytes kConnectXCnp = {
    0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61,
    0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00, 0x12, 0x01,                    // IPv4
    0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00,                    // UDP
    0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                    // BTH,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                    // pad
    0x82, 0xfd, 0x00, 0x2a,                                            // ICRC
};

TEST(IcrcRoceV2, MatchesAnIcrcComputedByHardware) {
  const auto covered = std::span(kConnectXCnp).first(kConnectXCnp.size() - 4);
  EXPECT_EQ(icrc_roce_v2(covered), load_icrc(&kConnectXCnp[kConnectXCnp.size() - 4]));
}

// IPv4 / UDP 4791 / BTH RC SEND ONLY / "abcd". Expected: zlib.crc32 of eight
// 0xff bytes, then the packet with TOS, TTL, IP checksum, UDP checksum and
// BTH resv8a (bytes 1, 8, 10-11, 26-27, 32) set to 0xff.
const Bytes kIpv4SendOnly = {
    0x45, 0x02, 0x00, 0x30, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0xab, 0xcd,
    0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0x02,                    // IPv4
    0xc0, 0x00, 0x12, 0xb7, 0x00, 0x1c, 0x5a, 0x5a,                    // UDP
    0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0x00, 0x00, 0x01,
    'a',  'b',  'c',  'd',
};
constexpr uint32_t kIpv4SendOnlyIcrc = 0xc6b50b50;

// IPv6 / UDP / BTH RC ACKNOWLEDGE / AETH. Expected: zlib.crc32 of eight 0xff
// bytes, then the packet with byte 0 |= 0x0f and bytes 1-3, 7, 46-47 and 52
// set to 0xff.
const Bytes kIpv6Ack = concat({
    {0x6a, 0x51, 0x23, 0x45, 0x00, 0x1c, 0x11, 0x40},
    sequence(0x10, 16), sequence(0x20, 16),
    {0xc0, 0x01, 0x12, 0xb7, 0x00, 0x1c, 0x5a, 0x5a},
    {0x11, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x22, 0x00, 0x00, 0x00, 0x05},
    {0x00, 0x00, 0x00, 0x09},
});
constexpr uint32_t kIpv6AckIcrc = 0xc78e89f8;

TEST(IcrcRoceV2, Ipv4FixedVector) {
  EXPECT_EQ(icrc_roce_v2(kIpv4SendOnly), kIpv4SendOnlyIcrc);
  EXPECT_EQ(icrc_roce_v2(kIpv4SendOnly),
            model_icrc(kIpv4SendOnly, roce_variant_bits(false, 20), 8));
}

TEST(IcrcRoceV2, Ipv6FixedVector) {
  EXPECT_EQ(icrc_roce_v2(kIpv6Ack), kIpv6AckIcrc);
  EXPECT_EQ(icrc_roce_v2(kIpv6Ack),
            model_icrc(kIpv6Ack, roce_variant_bits(true, 0), 8));
}

TEST(IcrcRoceV2, Ipv4CoversEverythingButTosTtlChecksums) {
  // The version nibble and IHL decide the layout; flipping them is not a
  // change of a field's value, so leave them out.
  Bytes frame = kIpv4SendOnly;
  const auto variant = roce_variant_bits(false, 20);
  const uint32_t original = icrc_roce_v2(frame);
  for (size_t byte = 1; byte < frame.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      Bytes flipped = frame;
      flipped[byte] ^= static_cast<uint8_t>(1u << bit);
      const bool is_variant = variant_mask_at(variant, byte) & (1u << bit);
      EXPECT_EQ(icrc_roce_v2(flipped) == original, is_variant)
          << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(IcrcRoceV2, Ipv6CoversEverythingButTrafficClassFlowLabelHopLimit) {
  Bytes frame = kIpv6Ack;
  const auto variant = roce_variant_bits(true, 0);
  const uint32_t original = icrc_roce_v2(frame);
  for (size_t byte = 0; byte < frame.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      if (byte == 0 && bit >= 4) continue;  // version nibble
      Bytes flipped = frame;
      flipped[byte] ^= static_cast<uint8_t>(1u << bit);
      const bool is_variant = variant_mask_at(variant, byte) & (1u << bit);
      EXPECT_EQ(icrc_roce_v2(flipped) == original, is_variant)
          << "byte " << byte << " bit " << bit;
    }
  }
}

// With IP options the UDP header and BTH move; so do their masks.
TEST(IcrcRoceV2, Ipv4OptionsShiftTheUdpAndBthMasks) {
  Bytes frame = kIpv4SendOnly;
  frame[0] = 0x46;  // IHL 6: one word of options
  frame.insert(frame.begin() + 20, {0x01, 0x01, 0x01, 0x00});
  EXPECT_EQ(icrc_roce_v2(frame),
            model_icrc(frame, roce_variant_bits(false, 24), 8));
  Bytes changed = frame;
  changed[24 + 6] ^= 0xff;       // UDP checksum
  changed[24 + 8 + 4] ^= 0x40;   // BTH BECN
  EXPECT_EQ(icrc_roce_v2(changed), icrc_roce_v2(frame));
}

TEST(IcrcRoceV2, EveryPrefixIsSafeAndMatchesTheModel) {
  for (const Bytes* frame : {&kIpv4SendOnly, &kIpv6Ack}) {
    const bool ipv6 = frame == &kIpv6Ack;
    for (size_t length = 0; length <= frame->size(); ++length) {
      const Bytes prefix(frame->begin(), frame->begin() + length);
      const auto variant = length == 0 ? std::vector<BitRange>{}
                                       : roce_variant_bits(ipv6, 20);
      EXPECT_EQ(icrc_roce_v2(prefix), model_icrc(prefix, variant, 8)) << length;
    }
  }
}

}  // namespace
}  // namespace softverbs::packet
