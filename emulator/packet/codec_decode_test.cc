// The IB frame codec's decoder on malformed frames: truncation at every
// byte, every bit flip the ICRC covers, and each header check (LRH, GRH,
// opcode, TVer, pad, payload) failing on its own.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "emulator/packet/codec.h"
#include "emulator/packet/codec_test_support.h"
#include "emulator/packet/icrc.h"
#include "emulator/packet/packet_test_support.h"

namespace softverbs::packet {
namespace {

using testing::Bytes;
using testing::encode;
using testing::info;
using testing::kAllOpcodes;
using testing::random_headers;
using testing::write_first_headers;

// Rewrites the ICRC after a test has edited a frame on purpose, so that the
// check under test is the only thing wrong with it.
void reseal(Bytes& frame) {
  const size_t covered = frame.size() - kIcrcBytes;
  store_icrc(frame.data() + covered, icrc_ib(std::span(frame).first(covered)));
}

DecodeError decode(std::span<const uint8_t> frame) {
  DecodedPacket packet;
  return decode_ib(frame, packet);
}

// ---- Rejection of malformed frames ---------------------------------------

struct Sample {
  const char* what;
  Headers headers;
  Bytes payload;
};

std::vector<Sample> samples() {
  std::vector<Sample> all;
  std::mt19937_64 rng(42);
  for (Opcode opcode : kAllOpcodes) {
    for (bool has_grh : {false, true}) {
      Headers h = random_headers(opcode, has_grh, rng);
      Bytes payload;
      if (info(opcode).has_payload) payload = {1, 2, 3, 4, 5, 6, 7};
      all.push_back({info(opcode).name, h, payload});
    }
  }
  return all;
}

TEST(CodecDecode, TruncationAtEveryByteIsAnError) {
  for (const Sample& s : samples()) {
    const Bytes frame = encode(s.headers, s.payload);
    for (size_t length = 0; length < frame.size(); ++length) {
      EXPECT_EQ(decode(std::span(frame).first(length)), DecodeError::kTruncated)
          << s.what << " grh " << s.headers.has_grh << " length " << length;
    }
  }
}

// A frame cut inside its headers whose LRH (and GRH) lengths and ICRC are
// made to agree with the cut: only the header size check can catch it.
TEST(CodecDecode, ConsistentLengthsShorterThanTheHeadersAreTruncated) {
  for (const Sample& s : samples()) {
    const Bytes frame = encode(s.headers, s.payload);
    const size_t needed = ib_header_bytes(s.headers) + kIcrcBytes;
    for (size_t length = kLrhBytes; length < needed; length += 4) {
      Bytes cut(frame.begin(), frame.begin() + length);
      cut[4] = static_cast<uint8_t>(length / 4 >> 8);
      cut[5] = static_cast<uint8_t>(length / 4);
      const size_t routing_bytes =
          kLrhBytes + (s.headers.has_grh ? kGrhBytes : 0);
      if (s.headers.has_grh && length >= routing_bytes) {
        const size_t pay_len = length - routing_bytes;
        cut[kLrhBytes + 4] = static_cast<uint8_t>(pay_len >> 8);
        cut[kLrhBytes + 5] = static_cast<uint8_t>(pay_len);
      }
      // Where the ICRC would land on the LRH or GRH, leave it: rewriting it
      // would undo the length fields just set.
      if (length >= routing_bytes + kIcrcBytes) reseal(cut);
      EXPECT_EQ(decode(cut), DecodeError::kTruncated)
          << s.what << " grh " << s.headers.has_grh << " length " << length;
    }
  }
}

// Bits that the ICRC leaves out (IBTA 7.8.1) and the decoder does not
// validate: VL and resv8a; for global frames also the LRH but LVer, LNH
// and PktLen, and the GRH's TClass, FlowLabel and HopLmt.
bool is_unchecked_variant_bit(bool global, size_t byte, int bit) {
  const size_t bth = global ? kLrhBytes + kGrhBytes : kLrhBytes;
  if (byte == bth + 4) return true;  // F, B, reserved
  if (!global) return byte == 0 && bit >= 4;
  if (byte == 0) return bit >= 4;                 // VL, not LVer
  if (byte == 1) return bit >= 2;                 // SL, rsv, not LNH
  if (byte == 4) return bit >= 3;                 // rsv, not PktLen
  if (byte == 2 || byte == 3 || byte == 6 || byte == 7) return true;
  if (byte == 8) return bit < 4;                  // TClass, not IPVer
  return byte == 9 || byte == 10 || byte == 11 || byte == 15;
}

TEST(CodecDecode, EveryCoveredBitFlipIsAnError) {
  for (const Sample& s : samples()) {
    const Bytes frame = encode(s.headers, s.payload);
    const bool global = s.headers.has_grh;
    const size_t extensions_start = ib_header_bytes(s.headers) -
                                    extension_header_bytes(s.headers.bth.opcode);
    for (size_t byte = 0; byte < frame.size(); ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        Bytes flipped = frame;
        flipped[byte] ^= static_cast<uint8_t>(1u << bit);
        const DecodeError error = decode(flipped);
        if (is_unchecked_variant_bit(global, byte, bit)) {
          EXPECT_EQ(error, DecodeError::kNone)
              << s.what << " byte " << byte << " bit " << bit;
        } else if (byte >= extensions_start) {
          // Extension headers, payload, pad and the ICRC itself: only the
          // ICRC can tell.
          EXPECT_EQ(error, DecodeError::kBadIcrc)
              << s.what << " byte " << byte << " bit " << bit;
        } else {
          EXPECT_NE(error, DecodeError::kNone)
              << s.what << " byte " << byte << " bit " << bit;
        }
      }
    }
  }
}

// Changing the fields the ICRC leaves out keeps the frame valid and shows
// the new values.
TEST(CodecDecode, VariantFieldsChangeWithoutBreakingTheIcrc) {
  Headers h = write_first_headers();
  h.has_grh = true;
  const Bytes payload = {1, 2, 3};
  Bytes frame = encode(h, payload);
  frame[0] = static_cast<uint8_t>((frame[0] & 0x0f) | 0x50);  // VL 5
  frame[2] ^= 0xff;                                          // DLID
  frame[kLrhBytes + 1] ^= 0xff;                              // TClass, flow
  frame[kLrhBytes + 7] = 1;                                  // HopLmt
  frame[kLrhBytes + kGrhBytes + 4] = 0x40;                   // BECN, not FECN
  DecodedPacket decoded;
  ASSERT_EQ(decode_ib(frame, decoded), DecodeError::kNone);
  EXPECT_EQ(decoded.headers.lrh.vl, 5);
  EXPECT_EQ(decoded.headers.lrh.dlid, h.lrh.dlid ^ 0xff00);
  EXPECT_EQ(decoded.headers.grh.hop_limit, 1);
  EXPECT_FALSE(decoded.headers.bth.fecn);
  EXPECT_TRUE(decoded.headers.bth.becn);
  EXPECT_EQ(decoded.headers.bth.psn, h.bth.psn);
}

Bytes sealed_ack(bool has_grh) {
  Headers h;
  h.has_grh = has_grh;
  h.bth.opcode = Opcode::kRcAcknowledge;
  return encode(h, {});
}

TEST(CodecDecode, LinkVersionMustBeZero) {
  Bytes frame = sealed_ack(false);
  frame[0] |= 0x01;
  reseal(frame);
  EXPECT_EQ(decode(frame), DecodeError::kBadLrh);
}

// LNH 0 (raw) and 1 (IP, non-IBA) carry no IBA transport.
TEST(CodecDecode, NonIbaLinkNextHeaderIsRejected) {
  for (uint8_t lnh : {0, 1}) {
    Bytes frame = sealed_ack(false);
    frame[1] = static_cast<uint8_t>((frame[1] & ~3) | lnh);
    reseal(frame);
    EXPECT_EQ(decode(frame), DecodeError::kBadLrh) << int(lnh);
  }
}

TEST(CodecDecode, BytesBeyondPktLenAreRejected) {
  Bytes frame = sealed_ack(false);
  frame.insert(frame.end(), 4, 0);
  EXPECT_EQ(decode(frame), DecodeError::kBadLrh);
}

TEST(CodecDecode, GrhMustBeIpv6CarryingIbaTransport) {
  Bytes bad_version = sealed_ack(true);
  bad_version[kLrhBytes] = static_cast<uint8_t>(0x40 | (bad_version[kLrhBytes] & 0x0f));
  reseal(bad_version);
  EXPECT_EQ(decode(bad_version), DecodeError::kBadGrh);

  Bytes bad_next = sealed_ack(true);
  bad_next[kLrhBytes + 6] = 0x11;
  reseal(bad_next);
  EXPECT_EQ(decode(bad_next), DecodeError::kBadGrh);

  Bytes bad_length = sealed_ack(true);
  bad_length[kLrhBytes + 5] += 4;
  reseal(bad_length);
  EXPECT_EQ(decode(bad_length), DecodeError::kBadGrh);
}

TEST(CodecDecode, UnknownOpcodesAreRejected) {
  // 0x15 and 0x18 are reserved RC codes (0xb5 and 0xb8 their XRC mirrors),
  // 0x40 is RD, 0x81 a CNP.
  for (uint8_t code : {0x15, 0x18, 0x1f, 0x2c, 0x40, 0x66, 0x81, 0xb5, 0xb8, 0xff}) {
    Bytes frame = sealed_ack(false);
    frame[kLrhBytes] = code;
    reseal(frame);
    EXPECT_EQ(decode(frame), DecodeError::kUnknownOpcode) << int(code);
  }
}

TEST(CodecDecode, TransportVersionMustBeZero) {
  Bytes frame = sealed_ack(false);
  frame[kLrhBytes + 1] |= 0x01;
  reseal(frame);
  EXPECT_EQ(decode(frame), DecodeError::kBadTver);
}

TEST(CodecDecode, PadLongerThanWhatFollowsTheHeadersIsRejected) {
  Bytes ack = sealed_ack(false);
  ack[kLrhBytes + 1] |= 0x10;  // PadCnt 1 on a packet without payload
  reseal(ack);
  EXPECT_EQ(decode(ack), DecodeError::kBadPad);

  Headers h;
  h.bth.opcode = Opcode::kRcSendOnly;
  Bytes empty_send = encode(h, {});
  empty_send[kLrhBytes + 1] |= 0x30;  // PadCnt 3, zero bytes of payload
  reseal(empty_send);
  EXPECT_EQ(decode(empty_send), DecodeError::kBadPad);

  // A whole word of pad bytes but one is fine: one byte of payload.
  Bytes one_byte_send = encode(h, Bytes{0x77});
  DecodedPacket decoded;
  ASSERT_EQ(decode_ib(one_byte_send, decoded), DecodeError::kNone);
  EXPECT_EQ(decoded.payload.size(), 1u);
  EXPECT_EQ(decoded.payload[0], 0x77);
}

TEST(CodecDecode, PayloadOnAnOpcodeWithoutOneIsRejected) {
  for (Opcode opcode : {Opcode::kRcAcknowledge, Opcode::kRcReadRequest,
                        Opcode::kRcCompareSwap, Opcode::kRcAtomicAcknowledge}) {
    Headers h;
    h.bth.opcode = opcode;
    Bytes frame = encode(h, {});
    frame.insert(frame.end() - kIcrcBytes, {1, 2, 3, 4});
    frame[5] = static_cast<uint8_t>(frame.size() / 4);
    reseal(frame);
    EXPECT_EQ(decode(frame), DecodeError::kUnexpectedPayload) << info(opcode).name;
  }
}

TEST(CodecDecode, ErrorNamesAreDistinct) {
  std::set<std::string> names;
  const DecodeError all[] = {
      DecodeError::kNone,    DecodeError::kTruncated, DecodeError::kBadLrh,
      DecodeError::kBadGrh,  DecodeError::kUnknownOpcode, DecodeError::kBadTver,
      DecodeError::kBadPad,  DecodeError::kBadIcrc, DecodeError::kUnexpectedPayload};
  for (DecodeError error : all) {
    ASSERT_NE(to_string(error), nullptr);
    names.insert(to_string(error));
  }
  EXPECT_EQ(names.size(), std::size(all));
}

}  // namespace
}  // namespace softverbs::packet
