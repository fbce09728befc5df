// Corruption flips only bits the ICRC covers: checked bit by bit against the
// codec's own ICRC, for local and global frames.
#include "emulator/fault/bit_flip.h"

#include <gtest/gtest.h>

#include "emulator/fault/fault_test_frames.h"

namespace softverbs::fault {
namespace {

using testing::Bytes;
using testing::make_frame;

// For every bit of the frame: flipping a covered bit makes decoding fail;
// flipping an uncovered one goes unseen (the ICRC masks it), which is why
// corruption never picks it. The one exception: in a global frame the whole
// LRH is masked, yet a flip of its LVer, LNH or PktLen still fails the
// codec's structural checks. Returns the number of uncovered bits.
size_t expect_coverage_matches_the_codec(const Bytes& original, bool global) {
  size_t uncovered = 0;
  for (size_t bit = 0; bit < original.size() * 8; ++bit) {
    Bytes frame = original;
    flip_bit(frame, bit);
    packet::DecodedPacket packet;
    const packet::DecodeError error = packet::decode_ib(frame, packet);
    if (icrc_covers_bit(original, bit)) {
      EXPECT_NE(error, packet::DecodeError::kNone) << "flip of covered bit " << bit << " unseen";
      continue;
    }
    ++uncovered;
    if (!(global && bit < packet::kLrhBytes * 8)) {
      EXPECT_EQ(error, packet::DecodeError::kNone) << "bit " << bit << " is covered after all";
    }
  }
  return uncovered;
}

TEST(BitFlip, LocalFrameCoverageMatchesTheIcrc) {
  const Bytes frame = make_frame(0x12, 7, packet::Opcode::kRcWriteFirst, 20);
  // VL (4 bits) and the BTH's resv8a byte.
  EXPECT_EQ(expect_coverage_matches_the_codec(frame, false), 4u + 8u);
  EXPECT_FALSE(icrc_covers_bit(frame, 0));  // VL
  EXPECT_TRUE(icrc_covers_bit(frame, 4));   // LVer
  EXPECT_FALSE(icrc_covers_bit(frame, (packet::kLrhBytes + 4) * 8));  // BTH FECN
}

TEST(BitFlip, GlobalFrameCoverageMatchesTheIcrc) {
  const Bytes frame = make_frame(0x12, 7, packet::Opcode::kRcSendOnly, 20, /*global=*/true);
  // The LRH, the GRH's traffic class + flow label (28 bits) and hop limit,
  // the BTH's resv8a byte.
  EXPECT_EQ(expect_coverage_matches_the_codec(frame, true), 64u + 28u + 8u + 8u);
  EXPECT_FALSE(icrc_covers_bit(frame, 16));  // LRH DLID: a router rewrites it
  EXPECT_TRUE(icrc_covers_bit(frame, packet::kLrhBytes * 8));  // GRH IP version
}

TEST(BitFlip, ChosenBitsAreCoveredAndSpreadOverTheWholeFrame) {
  const Bytes frame = make_frame(0x12, 7, packet::Opcode::kRcSendOnly, 64);
  Random random(5);
  std::vector<bool> hit(frame.size(), false);
  for (int i = 0; i < 20000; ++i) {
    const size_t bit = choose_bit_to_flip(frame, random);
    ASSERT_LT(bit, frame.size() * 8);
    ASSERT_TRUE(icrc_covers_bit(frame, bit)) << bit;
    hit[bit / 8] = true;
  }
  for (size_t byte = 0; byte < frame.size(); ++byte) {
    if (byte == packet::kLrhBytes + 4) continue;  // resv8a: wholly variant
    EXPECT_TRUE(hit[byte]) << "byte " << byte << " never chosen";
  }
}

TEST(BitFlip, UnreadableFramesAreCoveredEverywhere) {
  const Bytes junk = {0xff, 0xff, 0xff};
  for (size_t bit = 0; bit < junk.size() * 8; ++bit) EXPECT_TRUE(icrc_covers_bit(junk, bit));
}

}  // namespace
}  // namespace softverbs::fault
