// The IB frame codec: byte-exact layouts (IBTA 7.7 LRH, 8.3 GRH, 9.2 BTH,
// 9.3 extension headers), round trips, and rejection of malformed frames.
#include <gtest/gtest.h>

#include <cctype>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "emulator/packet/allocation_counter.h"
#include "emulator/packet/codec.h"
#include "emulator/packet/icrc.h"
#include "emulator/packet/packet_test_support.h"

namespace softverbs::packet {
namespace {

using testing::kAllOpcodes;
using Bytes = std::vector<uint8_t>;

const OpcodeInfo& info(Opcode opcode) {
  return opcode_info(static_cast<uint8_t>(opcode));
}

Bytes encode(const Headers& headers, std::span<const uint8_t> payload) {
  Bytes frame(kMaxFrameBytes * 2);
  const size_t size = encode_ib(headers, payload, frame);
  frame.resize(size);
  return frame;
}

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

// ---- Byte-exact layouts --------------------------------------------------

Headers write_first_headers() {
  Headers h;
  h.lrh.vl = 0xa;
  h.lrh.sl = 0x7;
  h.lrh.dlid = 0x1234;
  h.lrh.slid = 0xbeef;
  h.bth.opcode = Opcode::kRcWriteFirst;
  h.bth.solicited = true;
  h.bth.pkey = 0x8001;
  h.bth.fecn = true;
  h.bth.dest_qp = 0xabcdef;
  h.bth.ack_req = true;
  h.bth.psn = 0x123456;
  h.reth = {.va = 0x0102030405060708, .rkey = 0x11223344, .dma_len = 0x10000};
  return h;
}

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

// Headers with every field random (wider than its wire field, too), for
// `opcode`.
Headers random_headers(Opcode opcode, bool has_grh, std::mt19937_64& rng) {
  auto r8 = [&] { return static_cast<uint8_t>(rng()); };
  auto r16 = [&] { return static_cast<uint16_t>(rng()); };
  auto r32 = [&] { return static_cast<uint32_t>(rng()); };
  Headers h;
  h.lrh = {.vl = r8(), .lver = 0, .sl = r8(), .lnh = r8(), .dlid = r16(),
           .pkt_len = r16(), .slid = r16()};
  h.has_grh = has_grh;
  h.grh.traffic_class = r8();
  h.grh.flow_label = r32();
  h.grh.pay_len = r16();
  h.grh.hop_limit = r8();
  for (auto& b : h.grh.sgid) b = r8();
  for (auto& b : h.grh.dgid) b = r8();
  h.bth = {.opcode = opcode, .solicited = bool(rng() & 1),
           .mig_req = bool(rng() & 1), .pad_count = r8(), .tver = 0,
           .pkey = r16(), .fecn = bool(rng() & 1), .becn = bool(rng() & 1),
           .dest_qp = r32(), .ack_req = bool(rng() & 1), .psn = r32()};
  h.reth = {.va = rng(), .rkey = r32(), .dma_len = r32()};
  h.aeth = {.syndrome = r8(), .msn = r32()};
  h.atomic_eth = {.va = rng(), .rkey = r32(), .swap_add = rng(),
                  .compare = rng()};
  h.atomic_ack_eth.orig_data = rng();
  h.deth = {.qkey = r32(), .src_qp = r32()};
  h.imm_data = r32();
  h.ieth_rkey = r32();
  h.xrc_srqn = r32();
  h.feth = {.placement_type = r8(), .selectivity_level = r8()};
  return h;
}

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
