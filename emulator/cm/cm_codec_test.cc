// The CM MAD codec: round trips of every message, the layout tables'
// own consistency, width checks at encode, and rejection of malformed MADs.
// Byte positions themselves are checked by hand in cm_wire_layout_test.cc.
#include <gtest/gtest.h>

#include <bitset>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "emulator/cm/cm_codec.h"
#include "emulator/cm/cm_message_layout.h"
#include "emulator/cm/cm_test_messages.h"

namespace softverbs::cm {
namespace {

using Mad = std::array<uint8_t, kMadBytes>;
using Bits = std::bitset<kMadDataBytes * 8>;

Mad encode_ok(const CmMad& mad) {
  Mad out{};
  const EncodeStatus status = encode_cm_mad(mad, out);
  EXPECT_TRUE(status.ok()) << to_string(status.error) << " " << status.field;
  return out;
}

template <typename M> M sample();
template <> ReqMessage sample() { return testing::sample_req(); }
template <> MraMessage sample() { return testing::sample_mra(); }
template <> RejMessage sample() { return testing::sample_rej(); }
template <> RepMessage sample() { return testing::sample_rep(); }
template <> RtuMessage sample() { return testing::sample_rtu(); }
template <> DreqMessage sample() { return testing::sample_dreq(); }
template <> DrepMessage sample() { return testing::sample_drep(); }
template <> SidrReqMessage sample() { return testing::sample_sidr_req(); }
template <> SidrRepMessage sample() { return testing::sample_sidr_rep(); }

template <typename M>
class EveryMessage : public ::testing::Test {};
using AllMessages =
    ::testing::Types<ReqMessage, MraMessage, RejMessage, RepMessage, RtuMessage,
                     DreqMessage, DrepMessage, SidrReqMessage, SidrRepMessage>;
TYPED_TEST_SUITE(EveryMessage, AllMessages);

// ---- Visitors over the layout tables ------------------------------------

// The message-data bits each field occupies; flags overlaps and strays.
struct Coverage {
  Bits bits;
  std::vector<std::string> problems;

  void mark(const char* name, unsigned first_bit, unsigned count) {
    for (unsigned b = first_bit; b < first_bit + count; ++b) {
      if (b >= bits.size()) {
        problems.push_back(std::string(name) + " runs past the MAD");
        return;
      }
      if (bits[b]) problems.push_back(std::string(name) + " overlaps another field");
      bits[b] = true;
    }
  }
  template <typename T>
  void operator()(const BitField& f, const T&) {
    if (!f.valid()) problems.push_back(std::string(f.name) + " is not a valid field");
    if (f.width > 8 * sizeof(T)) problems.push_back(std::string(f.name) + " wider than its type");
    mark(f.name, f.byte * 8u + f.bit, f.width);
  }
  void operator()(const SplitField& f, const uint32_t&) {
    for (const BitField* piece : {&f.high, &f.middle, &f.low}) {
      if (piece->width) mark(f.name, piece->byte * 8u + piece->bit, piece->width);
    }
  }
  template <size_t N>
  void operator()(const ByteField& f, const std::array<uint8_t, N>&) {
    if (f.length != N) problems.push_back(std::string(f.name) + " length differs from its array");
    mark(f.name, f.byte * 8u, f.length * 8u);
  }
};

template <typename T>
T all_ones(unsigned width) {
  const uint64_t ones = width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
  if constexpr (std::is_same_v<T, bool>) return true;
  else return static_cast<T>(ones);
}

// Sets every field to its largest value (every bit of it one).
struct FillOnes {
  template <typename T>
  void operator()(const BitField& f, T& value) { value = all_ones<T>(f.width); }
  void operator()(const SplitField& f, uint32_t& value) { value = all_ones<uint32_t>(f.width()); }
  template <size_t N>
  void operator()(const ByteField&, std::array<uint8_t, N>& bytes) { bytes.fill(0xff); }
};

// Makes field number `target` one too large for its width, if its C++ type
// can hold such a value; reports which field that was.
struct OverflowOne {
  size_t target;
  size_t index = 0;
  const char* overflowed = nullptr;

  template <typename T>
  void operator()(const BitField& f, T& value) {
    if (index++ != target || std::is_same_v<T, bool> || f.width >= 8 * sizeof(T)) return;
    value = static_cast<T>(uint64_t{1} << f.width);
    overflowed = f.name;
  }
  void operator()(const SplitField& f, uint32_t& value) {
    if (index++ != target) return;
    value = uint32_t{1} << f.width();
    overflowed = f.name;
  }
  template <size_t N>
  void operator()(const ByteField&, std::array<uint8_t, N>&) { ++index; }
};

// ---- Layout tables --------------------------------------------------------

// Each table is a partition of the 232 data bytes into fields and reserved
// bits: no field overlaps another or leaves the MAD, the byte areas have
// their arrays' sizes, and the private data runs to the last byte.
TYPED_TEST(EveryMessage, LayoutFieldsAreDisjointAndEndAtTheMadsEnd) {
  TypeParam message{};
  Coverage coverage;
  layout::for_each_field(message, coverage);
  EXPECT_TRUE(coverage.problems.empty()) << ::testing::PrintToString(coverage.problems);
  const size_t private_start = (kMadDataBytes - TypeParam::kPrivateDataBytes) * 8;
  for (size_t b = private_start; b < coverage.bits.size(); ++b) {
    ASSERT_TRUE(coverage.bits[b]) << "bit " << b << " after the private data start";
  }
}

// ---- Round trips ----------------------------------------------------------

TYPED_TEST(EveryMessage, RoundTripsDistinctValuesInEveryField) {
  const CmMad mad{0xfedcba9876543210, 0x00000001, sample<TypeParam>()};
  const Mad bytes = encode_ok(mad);
  CmMad decoded;
  ASSERT_EQ(decode_cm_mad(bytes, decoded), DecodeError::kNone);
  EXPECT_EQ(decoded, mad);
}

// Every field at its largest value: what is encoded is exactly the fields'
// bits, all ones, and every reserved bit zero.
TYPED_TEST(EveryMessage, LargestValuesRoundTripAndReservedBitsStayZero) {
  CmMad mad{~uint64_t{0}, ~uint32_t{0}, TypeParam{}};
  auto& message = std::get<TypeParam>(mad.message);
  layout::for_each_field(message, FillOnes{});
  if constexpr (std::is_same_v<TypeParam, RejMessage>) message.reject_info_length = 72;
  if constexpr (std::is_same_v<TypeParam, SidrRepMessage>) message.additional_info_length = 72;
  const Mad bytes = encode_ok(mad);

  // The two 72-byte-area lengths hold 72, not all ones: count them as ones.
  Mad compared = bytes;
  if constexpr (std::is_same_v<TypeParam, RejMessage>) compared[kMadHeaderBytes + 9] |= 0xfe;
  if constexpr (std::is_same_v<TypeParam, SidrRepMessage>) compared[kMadHeaderBytes + 5] = 0xff;
  Coverage coverage;
  layout::for_each_field(message, coverage);
  Bits encoded;
  for (size_t b = 0; b < encoded.size(); ++b) {
    encoded[b] = (compared[kMadHeaderBytes + b / 8] >> (7 - b % 8)) & 1;
  }
  EXPECT_EQ(encoded, coverage.bits);

  CmMad decoded;
  ASSERT_EQ(decode_cm_mad(bytes, decoded), DecodeError::kNone);
  EXPECT_EQ(decoded, mad);
}

// IBTA: reserved fields are ignored on receipt.
TYPED_TEST(EveryMessage, DecodeIgnoresReservedBits) {
  const CmMad mad{7, 0, sample<TypeParam>()};
  Mad bytes = encode_ok(mad);
  TypeParam message{};
  Coverage coverage;
  layout::for_each_field(message, coverage);
  for (size_t b = 0; b < coverage.bits.size(); ++b) {
    if (!coverage.bits[b]) bytes[kMadHeaderBytes + b / 8] |= uint8_t(0x80 >> (b % 8));
  }
  bytes[18] = bytes[19] = 0xff;                    // MAD header reserved
  bytes[4] = bytes[5] = bytes[6] = bytes[7] = 0x5a;  // status, class-specific
  CmMad decoded;
  ASSERT_EQ(decode_cm_mad(bytes, decoded), DecodeError::kNone);
  EXPECT_EQ(decoded, mad);
}

// Whatever bytes a peer sends under a valid header decode to values that
// fit their fields, and encode back to the same bytes but the reserved bits.
TYPED_TEST(EveryMessage, RandomBodiesDecodeAndReencodeToTheSameFields) {
  std::mt19937 random(0x5eed + static_cast<uint16_t>(TypeParam::kAttributeId));
  TypeParam probe{};
  Coverage coverage;
  layout::for_each_field(probe, coverage);
  const Mad header = encode_ok({3, 0, TypeParam{}});
  for (int round = 0; round < 200; ++round) {
    Mad bytes = header;
    for (size_t i = kMadHeaderBytes; i < kMadBytes; ++i) bytes[i] = static_cast<uint8_t>(random());
    CmMad decoded;
    const DecodeError error = decode_cm_mad(bytes, decoded);
    if (error == DecodeError::kBadLength) continue;  // REJ, SIDR_REP lengths > 72
    ASSERT_EQ(error, DecodeError::kNone);
    const Mad again = encode_ok(decoded);
    for (size_t b = 0; b < coverage.bits.size(); ++b) {
      const size_t byte = kMadHeaderBytes + b / 8;
      const uint8_t bit = uint8_t(0x80 >> (b % 8));
      ASSERT_EQ(again[byte] & bit, coverage.bits[b] ? bytes[byte] & bit : 0) << "bit " << b;
    }
  }
}

// ---- Encode-time checks ---------------------------------------------------

// Every field narrower than its C++ type refuses the smallest value that
// does not fit, naming the field, and leaves the output untouched.
TYPED_TEST(EveryMessage, EncodeRejectsEveryValueTooWideForItsField) {
  size_t fields = 0;
  {
    TypeParam probe{};
    OverflowOne counter{~size_t{0}};
    layout::for_each_field(probe, counter);
    fields = counter.index;
  }
  size_t narrow = 0;
  for (size_t i = 0; i < fields; ++i) {
    TypeParam message = sample<TypeParam>();
    OverflowOne overflow{i};
    layout::for_each_field(message, overflow);
    if (!overflow.overflowed) continue;
    ++narrow;
    Mad out;
    out.fill(0xa5);
    const EncodeStatus status = encode_cm_mad({1, 0, message}, out);
    EXPECT_EQ(status.error, EncodeError::kValueTooWide) << overflow.overflowed;
    EXPECT_STREQ(status.field, overflow.overflowed);
    EXPECT_EQ(out[0], 0xa5) << overflow.overflowed;
  }
  if constexpr (std::is_same_v<TypeParam, ReqMessage>) {
    EXPECT_EQ(narrow, 21u);
  }
}

TEST(CmCodec, EncodeRejectsLengthsBeyondTheirArea) {
  Mad out{};
  RejMessage rej = testing::sample_rej();
  rej.reject_info_length = 73;
  EncodeStatus status = encode_cm_mad({1, 0, rej}, out);
  EXPECT_EQ(status.error, EncodeError::kLengthTooLarge);
  EXPECT_STREQ(status.field, "reject_info_length");

  SidrRepMessage rep = testing::sample_sidr_rep();
  rep.additional_info_length = 73;
  status = encode_cm_mad({1, 0, rep}, out);
  EXPECT_EQ(status.error, EncodeError::kLengthTooLarge);
  EXPECT_STREQ(status.field, "additional_info_length");
}

// ---- Malformed input ------------------------------------------------------

DecodeError decode(std::span<const uint8_t> bytes) {
  CmMad out;
  return decode_cm_mad(bytes, out);
}

Mad valid_req_mad() { return encode_ok({42, 0, testing::sample_req()}); }

TEST(CmCodec, RejectsBuffersThatAreNotOneMad) {
  const Mad mad = valid_req_mad();
  EXPECT_EQ(decode(std::span(mad).first(kMadBytes - 1)), DecodeError::kTruncated);
  EXPECT_EQ(decode(std::span(mad).first(kMadHeaderBytes)), DecodeError::kTruncated);
  EXPECT_EQ(decode({}), DecodeError::kTruncated);
  std::vector<uint8_t> longer(mad.begin(), mad.end());
  longer.push_back(0);
  EXPECT_EQ(decode(longer), DecodeError::kTrailingBytes);
}

TEST(CmCodec, RejectsForeignHeaders) {
  const auto with = [](size_t offset, uint8_t value) {
    Mad mad = valid_req_mad();
    mad[offset] = value;
    return decode(mad);
  };
  EXPECT_EQ(with(0, 0x02), DecodeError::kBadBaseVersion);
  EXPECT_EQ(with(0, 0x80), DecodeError::kBadBaseVersion);  // OPA
  EXPECT_EQ(with(1, 0x03), DecodeError::kNotCmClass);      // SA
  EXPECT_EQ(with(1, 0x01), DecodeError::kNotCmClass);      // SMP
  EXPECT_EQ(with(2, 0x01), DecodeError::kBadClassVersion);
  EXPECT_EQ(with(2, 0x03), DecodeError::kBadClassVersion);
  EXPECT_EQ(with(3, 0x01), DecodeError::kBadMethod);        // Get
  EXPECT_EQ(with(3, 0x83), DecodeError::kBadMethod);        // Send with R bit
}

TEST(CmCodec, RejectsAttributesThatAreNotCmMessages) {
  for (uint16_t attribute : {0x0000, 0x0001 /* ClassPortInfo */, 0x000f,
                             0x0019 /* LAP */, 0x001a /* APR */, 0x0110, 0xffff}) {
    Mad mad = valid_req_mad();
    mad[16] = static_cast<uint8_t>(attribute >> 8);
    mad[17] = static_cast<uint8_t>(attribute);
    EXPECT_EQ(decode(mad), DecodeError::kUnknownAttribute) << attribute;
  }
}

TEST(CmCodec, RejectsLengthFieldsBeyondTheirArea) {
  Mad rej = encode_ok({1, 0, testing::sample_rej()});
  rej[kMadHeaderBytes + 9] = 73 << 1;  // reject info length
  EXPECT_EQ(decode(rej), DecodeError::kBadLength);
  rej[kMadHeaderBytes + 9] = 72 << 1;
  EXPECT_EQ(decode(rej), DecodeError::kNone);

  Mad rep = encode_ok({1, 0, testing::sample_sidr_rep()});
  rep[kMadHeaderBytes + 5] = 0xff;  // additional information length
  EXPECT_EQ(decode(rep), DecodeError::kBadLength);
}

TEST(CmCodec, FailedDecodeLeavesOutputAlone) {
  Mad mad = valid_req_mad();
  mad[1] = 0x04;
  CmMad out{99, 5, testing::sample_rtu()};
  const CmMad before = out;
  EXPECT_EQ(decode_cm_mad(mad, out), DecodeError::kNotCmClass);
  EXPECT_EQ(out, before);
}

TEST(CmCodec, NamesOfMessagesAndErrors) {
  EXPECT_STREQ(message_name(AttributeId::kReq), "REQ");
  EXPECT_STREQ(message_name(AttributeId::kSidrRep), "SIDR_REP");
  EXPECT_STREQ(message_name(static_cast<AttributeId>(0x19)), "unknown");
  EXPECT_EQ(attribute_id(CmMessage{DreqMessage{}}), AttributeId::kDreq);
  EXPECT_STREQ(to_string(DecodeError::kBadMethod), "method is not Send");
  EXPECT_STREQ(to_string(EncodeError::kValueTooWide), "value too wide for its field");
}

}  // namespace
}  // namespace softverbs::cm
