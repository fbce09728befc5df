// The IB frame codec: byte-exact layouts (IBTA 7.7 LRH, 8.3 GRH, 9.2 BTH,
// 9.3 extension headers), round trips, encoding in place and its refusals,
// and PSN arithmetic. Rejection of malformed frames: codec_decode_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "emulator/packet/allocation_counter.h"
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

// ---- Byte-exact layouts --------------------------------------------------

// Field by field from the IBTA figures: LRH VL(4) LVer(4) SL(4) rsv(2)
// LNH(2) DLID(16) rsv(5) PktLen(11) SLID(16); BTH OpCode(8) SE M PadCnt(2)
// TVer(4) P_Key(16) F B rsv(6) DestQP(24) A rsv(7) PSN(24); RETH VA(64)
// R_Key(32) DMALen(32); payload, zero pad to a word, ICRC.
TEST(CodecLayout, RcWriteFirstLocalByteForByte) {
  const Bytes payload = {0xde, 0xad, 0xbe, 0xef, 0x42};
  const Bytes frame = encode(write_first_headers(), payload);
  const Bytes expected_without_icrc = {
      0xa0, 0x72, 0x12, 0x34, 0x00, 0x0c, 0xbe, 0xef,  // LRH, PktLen 12 words
      0x06, 0xb0, 0x80, 0x01, 0x80, 0xab, 0xcd, 0xef,  // BTH, SE + PadCnt 3
      0x80, 0x12, 0x34, 0x56,                          //   A + PSN
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,  // RETH VA
      0x11, 0x22, 0x33, 0x44, 0x00, 0x01, 0x00, 0x00,  //   R_Key, DMALen
      0xde, 0xad, 0xbe, 0xef, 0x42, 0x00, 0x00, 0x00,  // payload, pad
  };
  ASSERT_EQ(frame.size(), expected_without_icrc.size() + kIcrcBytes);
  EXPECT_EQ(Bytes(frame.begin(), frame.end() - 4), expected_without_icrc);
  // The ICRC of this frame, computed separately (see icrc_test.cc), least
  // significant byte first.
  EXPECT_EQ(Bytes(frame.end() - 4, frame.end()), (Bytes{0xb1, 0x6e, 0xd4, 0xc9}));
}

// GRH: IPVer(4) TClass(8) FlowLabel(20) PayLen(16) NxtHdr(8) HopLmt(8) SGID
// DGID; DETH Q_Key(32) rsv(8) SrcQP(24); ImmDt as given (network order).
TEST(CodecLayout, UdSendOnlyImmGlobalByteForByte) {
  Headers h;
  h.lrh.vl = 3;
  h.lrh.sl = 1;
  h.lrh.dlid = 7;
  h.lrh.slid = 9;
  h.has_grh = true;
  h.grh.traffic_class = 0xa5;
  h.grh.flow_label = 0x12345;
  h.grh.hop_limit = 0x40;
  for (int i = 0; i < 16; ++i) {
    h.grh.sgid[i] = static_cast<uint8_t>(0x10 + i);
    h.grh.dgid[i] = static_cast<uint8_t>(0x20 + i);
  }
  h.bth.opcode = Opcode::kUdSendOnlyImm;
  h.bth.dest_qp = 0x2a;
  h.bth.psn = 7;
  h.deth = {.qkey = 0x80010000, .src_qp = 0x102};
  const uint8_t imm_wire[4] = {0x01, 0x02, 0x03, 0x04};
  std::memcpy(&h.imm_data, imm_wire, 4);
  const Bytes payload = {'p', 'a', 'y', 'l', 'o', 'a', 'd', '!'};

  const Bytes frame = encode(h, payload);
  Bytes expected = {0x30, 0x13, 0x00, 0x07, 0x00, 0x15, 0x00, 0x09,  // LNH 3
                    0x6a, 0x51, 0x23, 0x45, 0x00, 0x24, 0x1b, 0x40};
  for (int i = 0; i < 16; ++i) expected.push_back(static_cast<uint8_t>(0x10 + i));
  for (int i = 0; i < 16; ++i) expected.push_back(static_cast<uint8_t>(0x20 + i));
  for (uint8_t b : {0x65, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x2a,  // BTH
                    0x00, 0x00, 0x00, 0x07,
                    0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02,  // DETH
                    0x01, 0x02, 0x03, 0x04}) {                       // ImmDt
    expected.push_back(b);
  }
  expected.insert(expected.end(), payload.begin(), payload.end());
  ASSERT_EQ(frame.size(), expected.size() + kIcrcBytes);
  EXPECT_EQ(Bytes(frame.begin(), frame.end() - 4), expected);
  EXPECT_EQ(load_icrc(&frame[frame.size() - 4]), 0x48bd31adu);
}

// The bytes after the BTH of a local frame.
Bytes extension_bytes(const Headers& h, std::span<const uint8_t> payload = {}) {
  const Bytes frame = encode(h, payload);
  return Bytes(frame.begin() + kLrhBytes + kBthBytes, frame.end() - kIcrcBytes);
}

TEST(CodecLayout, AtomicEthVaRkeySwapCompare) {
  Headers h;
  h.bth.opcode = Opcode::kRcCompareSwap;
  h.atomic_eth = {.va = 0x1122334455667788, .rkey = 0x99aabbcc,
                  .swap_add = 0x0102030405060708, .compare = 0xf1f2f3f4f5f6f7f8};
  EXPECT_EQ(extension_bytes(h),
            (Bytes{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
                   0x99, 0xaa, 0xbb, 0xcc,
                   0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
                   0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8}));
}

// IBTA 9.3: AETH precedes AtomicAckETH.
TEST(CodecLayout, AtomicAcknowledgeAethThenOriginalData) {
  Headers h;
  h.bth.opcode = Opcode::kRcAtomicAcknowledge;
  h.aeth = {.syndrome = 0x1f, .msn = 0xabcdef};
  h.atomic_ack_eth.orig_data = 0x0a0b0c0d0e0f1011;
  EXPECT_EQ(extension_bytes(h),
            (Bytes{0x1f, 0xab, 0xcd, 0xef,
                   0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11}));
}

TEST(CodecLayout, AethSyndromeAndMsn) {
  Headers h;
  h.bth.opcode = Opcode::kRcAcknowledge;
  h.aeth = {.syndrome = 0x60 | 0x01, .msn = 0x000102};  // NAK, invalid request
  EXPECT_EQ(extension_bytes(h), (Bytes{0x61, 0x00, 0x01, 0x02}));
}

TEST(CodecLayout, IethRkeyBeforePayload) {
  Headers h;
  h.bth.opcode = Opcode::kRcSendOnlyInv;
  h.ieth_rkey = 0xcafef00d;
  const Bytes payload = {1, 2, 3, 4};
  EXPECT_EQ(extension_bytes(h, payload),
            (Bytes{0xca, 0xfe, 0xf0, 0x0d, 1, 2, 3, 4}));
}

// IBTA 9.3: RETH precedes ImmDt.
TEST(CodecLayout, WriteOnlyImmRethThenImmDt) {
  Headers h;
  h.bth.opcode = Opcode::kRcWriteOnlyImm;
  h.reth = {.va = 1, .rkey = 2, .dma_len = 3};
  const uint8_t imm[4] = {0xaa, 0xbb, 0xcc, 0xdd};
  std::memcpy(&h.imm_data, imm, 4);
  EXPECT_EQ(extension_bytes(h),
            (Bytes{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3,
                   0xaa, 0xbb, 0xcc, 0xdd}));
}

TEST(CodecLayout, BthFlagBitsOneAtATime) {
  struct Case {
    void (*set)(Bth&);
    size_t byte;
    uint8_t value;
  };
  const Case cases[] = {
      {[](Bth& b) { b.solicited = true; }, 1, 0x80},
      {[](Bth& b) { b.mig_req = true; }, 1, 0x40},
      {[](Bth& b) { b.fecn = true; }, 4, 0x80},
      {[](Bth& b) { b.becn = true; }, 4, 0x40},
      {[](Bth& b) { b.ack_req = true; }, 8, 0x80},
  };
  for (const Case& c : cases) {
    Headers h;
    h.bth.opcode = Opcode::kRcAcknowledge;
    h.bth.pkey = 0;
    c.set(h.bth);
    const Bytes frame = encode(h, {});
    for (size_t i = 0; i < kBthBytes; ++i) {
      EXPECT_EQ(frame[kLrhBytes + i], i == 0 ? 0x11 : i == c.byte ? c.value : 0)
          << "case byte " << c.byte << " value " << int(c.value) << " at " << i;
    }
  }
}

TEST(CodecLayout, ExtensionHeaderSizes) {
  EXPECT_EQ(extension_header_bytes(Opcode::kRcSendOnly), 0u);
  EXPECT_EQ(extension_header_bytes(Opcode::kRcSendOnlyImm), 4u);
  EXPECT_EQ(extension_header_bytes(Opcode::kRcWriteFirst), 16u);
  EXPECT_EQ(extension_header_bytes(Opcode::kRcWriteOnlyImm), 20u);
  EXPECT_EQ(extension_header_bytes(Opcode::kRcReadResponseFirst), 4u);
  EXPECT_EQ(extension_header_bytes(Opcode::kRcCompareSwap), 28u);
  EXPECT_EQ(extension_header_bytes(Opcode::kRcAtomicAcknowledge), 12u);
  EXPECT_EQ(extension_header_bytes(Opcode::kRcSendLastInv), 4u);
  EXPECT_EQ(extension_header_bytes(Opcode::kUdSendOnly), 8u);
  EXPECT_EQ(extension_header_bytes(Opcode::kUdSendOnlyImm), 12u);
  EXPECT_EQ(extension_header_bytes(static_cast<Opcode>(0x15)), 0u);
}

// ---- Round trips ---------------------------------------------------------

// What decoding the frame of `h` must give back: fields cut to their wire
// width, derived fields filled in, absent headers at their defaults.
Headers expected_after_round_trip(Headers h, size_t payload_bytes) {
  const uint16_t present = info(h.bth.opcode).headers;
  const size_t frame = ib_frame_size(h, payload_bytes);
  h.lrh.vl &= 0xf;
  h.lrh.sl &= 0xf;
  h.lrh.lnh = h.has_grh ? 3 : 2;
  h.lrh.pkt_len = static_cast<uint16_t>(frame / 4);
  if (h.has_grh) {
    h.grh.flow_label &= 0xfffff;
    h.grh.pay_len = static_cast<uint16_t>(frame - kLrhBytes - kGrhBytes);
  } else {
    h.grh = Grh{};
  }
  h.bth.pad_count = static_cast<uint8_t>((4 - payload_bytes % 4) % 4);
  h.bth.dest_qp &= kPsnMask;
  h.bth.psn &= kPsnMask;
  h.aeth.msn &= kPsnMask;
  h.deth.src_qp &= kPsnMask;
  if (!(present & kHdrReth)) h.reth = Reth{};
  if (!(present & kHdrAeth)) h.aeth = Aeth{};
  if (!(present & kHdrAtomicEth)) h.atomic_eth = AtomicEth{};
  if (!(present & kHdrAtomicAckEth)) h.atomic_ack_eth = AtomicAckEth{};
  if (!(present & kHdrDeth)) h.deth = Deth{};
  if (!(present & kHdrImmDt)) h.imm_data = 0;
  if (!(present & kHdrIeth)) h.ieth_rkey = 0;
  h.feth = (present & kHdrFeth) ? Feth{uint8_t(h.feth.placement_type & 0xf),
                                       uint8_t(h.feth.selectivity_level & 0x3)}
                                : Feth{};
  h.xrc_srqn = (present & kHdrXrceth) ? h.xrc_srqn & kPsnMask : 0;
  return h;
}

class CodecRoundTrip : public ::testing::TestWithParam<Opcode> {};

TEST_P(CodecRoundTrip, EveryPayloadSizeWithAndWithoutGrh) {
  const Opcode opcode = GetParam();
  const size_t max_payload = info(opcode).has_payload ? 4096 : 0;
  std::mt19937_64 rng(static_cast<uint8_t>(opcode));
  Bytes payload(max_payload);
  for (uint8_t& b : payload) b = static_cast<uint8_t>(rng());
  std::vector<uint8_t> frame(kMaxFrameBytes);
  for (bool has_grh : {false, true}) {
    for (size_t size = 0; size <= max_payload; ++size) {
      const Headers h = random_headers(opcode, has_grh, rng);
      const auto data = std::span(payload).first(size);
      const size_t frame_bytes = encode_ib(h, data, frame);
      ASSERT_EQ(frame_bytes, ib_frame_size(h, size)) << size;
      ASSERT_EQ(frame_bytes % 4, 0u);
      ASSERT_LE(frame_bytes, kMaxFrameBytes);
      const size_t pad = (4 - size % 4) % 4;
      for (size_t i = 0; i < pad; ++i) {
        ASSERT_EQ(frame[frame_bytes - kIcrcBytes - pad + i], 0) << "pad";
      }

      DecodedPacket decoded;
      ASSERT_EQ(decode_ib(std::span(frame).first(frame_bytes), decoded),
                DecodeError::kNone)
          << "payload " << size << " grh " << has_grh;
      ASSERT_EQ(decoded.headers, expected_after_round_trip(h, size))
          << "payload " << size << " grh " << has_grh;
      ASSERT_EQ(decoded.payload.size(), size);
      ASSERT_TRUE(std::equal(data.begin(), data.end(), decoded.payload.begin()));
      ASSERT_EQ(decoded.payload.data(), frame.data() + ib_header_bytes(h));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllOpcodes, CodecRoundTrip, ::testing::ValuesIn(kAllOpcodes),
    [](const ::testing::TestParamInfo<Opcode>& param) {
      // RC_SEND_FIRST -> RcSendFirst
      std::string name;
      bool word_start = true;
      const uint8_t code = static_cast<uint8_t>(param.param);
      for (const char* c = opcode_info(code).name; *c; ++c) {
        if (*c == '_') {
          word_start = true;
          continue;
        }
        name += word_start ? *c : static_cast<char>(std::tolower(*c));
        word_start = false;
      }
      return name;
    });

TEST(CodecEncode, PayloadAlreadyInPlaceGivesTheSameFrame) {
  const Headers h = write_first_headers();
  const Bytes payload = {1, 2, 3, 4, 5, 6, 7};
  const Bytes reference = encode(h, payload);
  Bytes frame(kMaxFrameBytes);
  const size_t offset = ib_header_bytes(h);
  std::copy(payload.begin(), payload.end(), frame.begin() + offset);
  const size_t size =
      encode_ib(h, std::span(frame).subspan(offset, payload.size()), frame);
  frame.resize(size);
  EXPECT_EQ(frame, reference);
}

TEST(CodecEncode, PayloadOverlappingTheHeaderAreaIsMovedFirst) {
  const Headers h = write_first_headers();
  const Bytes payload = {9, 8, 7, 6, 5, 4, 3, 2, 1};
  const Bytes reference = encode(h, payload);
  Bytes frame(kMaxFrameBytes);
  std::copy(payload.begin(), payload.end(), frame.begin() + 3);
  const size_t size =
      encode_ib(h, std::span(frame).subspan(3, payload.size()), frame);
  frame.resize(size);
  EXPECT_EQ(frame, reference);
}

// A frame for this process's own memory: the same bytes but a zero ICRC,
// which only a decode that leaves the ICRC unchecked takes.
TEST(CodecEncode, OmittedIcrcIsZeroAndOnlyAnUncheckedDecodeTakesIt) {
  const Headers h = write_first_headers();
  const Bytes payload = {1, 2, 3, 4, 5, 6, 7};
  const Bytes reference = encode(h, payload);
  Bytes frame(kMaxFrameBytes);
  frame.resize(encode_ib(h, payload, frame, Icrc::kOmitted));
  ASSERT_EQ(frame.size(), reference.size());
  EXPECT_TRUE(std::equal(frame.begin(), frame.end() - kIcrcBytes, reference.begin()));
  EXPECT_EQ(Bytes(frame.end() - kIcrcBytes, frame.end()), Bytes(kIcrcBytes, 0));

  DecodedPacket out;
  EXPECT_EQ(decode_ib(frame, out), DecodeError::kBadIcrc);
  ASSERT_EQ(decode_ib(frame, out, Icrc::kOmitted), DecodeError::kNone);
  EXPECT_EQ(out.headers.bth.psn, h.bth.psn);
  EXPECT_TRUE(std::equal(out.payload.begin(), out.payload.end(), payload.begin(), payload.end()));
  // Everything but the ICRC is still checked.
  frame[0] |= 0x01;  // a link version other than 0
  EXPECT_NE(decode_ib(frame, out, Icrc::kOmitted), DecodeError::kNone);
}

TEST(CodecEncode, RefusesWhatCannotBeEncoded) {
  Headers h = write_first_headers();
  const Bytes payload(10, 0x5a);
  const size_t size = ib_frame_size(h, payload.size());
  Bytes out(size);
  EXPECT_EQ(encode_ib(h, payload, std::span(out).first(size - 1)), 0u);
  EXPECT_EQ(encode_ib(h, payload, out), size);
  EXPECT_EQ(encode_ib(h, payload, {}), 0u);

  Headers unknown = h;
  unknown.bth.opcode = static_cast<Opcode>(0x15);
  EXPECT_EQ(encode_ib(unknown, payload, out), 0u);

  Headers ack;
  ack.bth.opcode = Opcode::kRcAcknowledge;
  EXPECT_EQ(encode_ib(ack, payload, out), 0u) << "payload on an ACK";
}

// LRH PktLen has 11 bits: 2047 words, 8188 bytes of frame.
TEST(CodecEncode, LargestFramePktLenCanDescribe) {
  Headers h;
  h.bth.opcode = Opcode::kRcSendOnly;
  Bytes out(10000);
  const size_t largest_payload = 2047 * 4 - kLrhBytes - kBthBytes - kIcrcBytes;
  const Bytes payload(largest_payload + 1, 0x11);
  EXPECT_EQ(encode_ib(h, std::span(payload).first(largest_payload), out), 8188u);
  DecodedPacket decoded;
  EXPECT_EQ(decode_ib(std::span(out).first(8188), decoded), DecodeError::kNone);
  EXPECT_EQ(decoded.payload.size(), largest_payload);
  EXPECT_EQ(encode_ib(h, payload, out), 0u);
}

TEST(CodecEncode, NoHeapAllocation) {
  const Headers h = write_first_headers();
  const Bytes payload(1000, 0x33);
  Bytes frame(kMaxFrameBytes);
  DecodedPacket decoded;
  const size_t before = testing::allocation_count();
  const size_t size = encode_ib(h, payload, frame);
  const DecodeError error = decode_ib(std::span(frame).first(size), decoded);
  const size_t after = testing::allocation_count();
  EXPECT_NE(size, 0u);
  EXPECT_EQ(error, DecodeError::kNone);
  EXPECT_EQ(after, before);
}

// ---- PSN arithmetic (IBTA 9.7.1: modulo 2^24) -----------------------------

static_assert(psn_add(0xffffff, 1) == 0);
static_assert(psn_diff(0, 0xffffff) == 1);

TEST(Psn, AddWrapsAt24Bits) {
  EXPECT_EQ(psn_add(0, 0), 0u);
  EXPECT_EQ(psn_add(0xfffffe, 1), 0xffffffu);
  EXPECT_EQ(psn_add(0xffffff, 1), 0u);
  EXPECT_EQ(psn_add(0xfffffe, 5), 3u);
  EXPECT_EQ(psn_add(5, 0xffffff), 4u);  // adding 2^24 - 1 steps back one
}

TEST(Psn, DiffIsSignedAcrossTheWrap) {
  EXPECT_EQ(psn_diff(5, 5), 0);
  EXPECT_EQ(psn_diff(0, 0xffffff), 1);
  EXPECT_EQ(psn_diff(0xffffff, 0), -1);
  EXPECT_EQ(psn_diff(2, 0xfffffe), 4);
  EXPECT_EQ(psn_diff(0x7fffff, 0), 0x7fffff);   // furthest ahead
  EXPECT_EQ(psn_diff(0x800000, 0), -0x800000);  // half a circle: behind
  EXPECT_EQ(psn_diff(0, 0x800000), -0x800000);
}

TEST(Psn, AddAndDiffAreInverse) {
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t a = rng() & kPsnMask;
    const uint32_t b = rng() & kPsnMask;
    const int32_t d = psn_diff(a, b);
    ASSERT_GE(d, -(1 << 23));
    ASSERT_LT(d, 1 << 23);
    ASSERT_EQ(psn_add(b, static_cast<uint32_t>(d)), a);
    if (d != -(1 << 23)) {
      ASSERT_EQ(psn_diff(b, a), -d);
    }
  }
}

}  // namespace
}  // namespace softverbs::packet
