// The CM MAD codec. The message layouts live in cm_message_layout.h; this
// file only walks them: once to check widths, once to store, or once to
// load.
#include "emulator/cm/cm_codec.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#include "emulator/cm/cm_message_layout.h"

namespace softverbs::cm {
namespace {

constexpr uint16_t kFirstAttribute = static_cast<uint16_t>(AttributeId::kReq);

template <size_t... I>
constexpr bool alternatives_in_attribute_order(std::index_sequence<I...>) {
  return ((std::variant_alternative_t<I, CmMessage>::kAttributeId ==
           static_cast<AttributeId>(kFirstAttribute + I)) && ...);
}
static_assert(alternatives_in_attribute_order(
                  std::make_index_sequence<std::variant_size_v<CmMessage>>{}),
              "CmMessage alternatives must follow the attribute IDs");

template <typename T>
uint64_t to_bits(T value) {
  if constexpr (std::is_enum_v<T>) {
    return static_cast<uint64_t>(static_cast<std::underlying_type_t<T>>(value));
  } else {
    return static_cast<uint64_t>(value);
  }
}

template <typename T>
T from_bits(uint64_t bits) {
  if constexpr (std::is_same_v<T, bool>) {
    return bits != 0;
  } else {
    return static_cast<T>(bits);
  }
}

// The pieces of a split field, most significant first; absent ones skipped.
std::array<const BitField*, 3> pieces(const SplitField& field) {
  return {&field.high, field.middle.width ? &field.middle : nullptr, &field.low};
}

// Remembers the first field whose value does not fit its width.
struct WidthCheck {
  const char* first_too_wide = nullptr;

  template <typename T>
  void operator()(const BitField& field, const T& value) {
    if (!first_too_wide && to_bits(value) > field.max()) first_too_wide = field.name;
  }
  void operator()(const SplitField& field, uint32_t value) {
    if (!first_too_wide && (uint64_t{value} >> field.width()) != 0) {
      first_too_wide = field.name;
    }
  }
  template <size_t N>
  void operator()(const ByteField&, const std::array<uint8_t, N>&) {}
};

// Writes fields into the message data (MAD byte 24 on).
struct Store {
  uint8_t* data;

  template <typename T>
  void operator()(const BitField& field, const T& value) {
    store_bits(data, field, to_bits(value));
  }
  void operator()(const SplitField& field, uint32_t value) {
    unsigned below = field.width();
    for (const BitField* piece : pieces(field)) {
      if (!piece) continue;
      below -= piece->width;
      store_bits(data, *piece, value >> below);
    }
  }
  template <size_t N>
  void operator()(const ByteField& field, const std::array<uint8_t, N>& bytes) {
    std::memcpy(data + field.byte, bytes.data(), N);
  }
};

// Reads fields from the message data.
struct Load {
  const uint8_t* data;

  template <typename T>
  void operator()(const BitField& field, T& value) {
    value = from_bits<T>(load_bits(data, field));
  }
  void operator()(const SplitField& field, uint32_t& value) {
    uint64_t combined = 0;
    for (const BitField* piece : pieces(field)) {
      if (piece) combined = combined << piece->width | load_bits(data, *piece);
    }
    value = static_cast<uint32_t>(combined);
  }
  template <size_t N>
  void operator()(const ByteField& field, std::array<uint8_t, N>& bytes) {
    std::memcpy(bytes.data(), data + field.byte, N);
  }
};

// The two length fields that count bytes of a fixed 72-byte area.
const char* overlong_length(const CmMessage& message) {
  if (const auto* rej = std::get_if<RejMessage>(&message)) {
    if (rej->reject_info_length > RejMessage::kAriBytes) return "reject_info_length";
  }
  if (const auto* rep = std::get_if<SidrRepMessage>(&message)) {
    if (rep->additional_info_length > SidrRepMessage::kAdditionalInfoBytes) {
      return "additional_info_length";
    }
  }
  return nullptr;
}

using BodyDecoder = CmMessage (*)(const uint8_t* data);

template <size_t I>
CmMessage decode_body(const uint8_t* data) {
  std::variant_alternative_t<I, CmMessage> message;
  layout::for_each_field(message, Load{data});
  return message;
}

template <size_t... I>
constexpr std::array<BodyDecoder, sizeof...(I)> make_decoders(std::index_sequence<I...>) {
  return {&decode_body<I>...};
}

// Indexed by attribute ID - 0x10.
constexpr auto kBodyDecoders =
    make_decoders(std::make_index_sequence<std::variant_size_v<CmMessage>>{});

DecodeError check_header(const MadHeader& header) {
  if (header.base_version != kMadBaseVersion) return DecodeError::kBadBaseVersion;
  if (header.mgmt_class != kMgmtClassCm) return DecodeError::kNotCmClass;
  if (header.class_version != kCmClassVersion) return DecodeError::kBadClassVersion;
  if (header.method != kMadMethodSend) return DecodeError::kBadMethod;
  if (header.attribute_id < kFirstAttribute ||
      size_t{header.attribute_id} - kFirstAttribute >= kBodyDecoders.size()) {
    return DecodeError::kUnknownAttribute;
  }
  return DecodeError::kNone;
}

}  // namespace

const char* to_string(EncodeError error) {
  switch (error) {
    case EncodeError::kNone: return "none";
    case EncodeError::kValueTooWide: return "value too wide for its field";
    case EncodeError::kLengthTooLarge: return "length larger than its area";
  }
  return "unknown";
}

const char* to_string(DecodeError error) {
  switch (error) {
    case DecodeError::kNone: return "none";
    case DecodeError::kTruncated: return "shorter than a MAD";
    case DecodeError::kTrailingBytes: return "longer than a MAD";
    case DecodeError::kBadBaseVersion: return "MAD base version is not 1";
    case DecodeError::kNotCmClass: return "management class is not CM";
    case DecodeError::kBadClassVersion: return "CM class version is not 2";
    case DecodeError::kBadMethod: return "method is not Send";
    case DecodeError::kUnknownAttribute: return "attribute is not a CM message";
    case DecodeError::kBadLength: return "length field exceeds its area";
  }
  return "unknown";
}

EncodeStatus encode_cm_mad(const CmMad& mad, std::span<uint8_t, kMadBytes> out) {
  const char* too_wide = std::visit(
      [](const auto& message) {
        WidthCheck check;
        layout::for_each_field(message, check);
        return check.first_too_wide;
      },
      mad.message);
  if (too_wide) return {EncodeError::kValueTooWide, too_wide};
  if (const char* field = overlong_length(mad.message)) {
    return {EncodeError::kLengthTooLarge, field};
  }

  std::fill(out.begin(), out.end(), uint8_t{0});
  MadHeader header;
  header.transaction_id = mad.transaction_id;
  header.attribute_id = static_cast<uint16_t>(attribute_id(mad.message));
  header.attribute_modifier = mad.attribute_modifier;
  encode_mad_header(header, out.first<kMadHeaderBytes>());
  std::visit(
      [&](const auto& message) {
        layout::for_each_field(message, Store{out.data() + kMadHeaderBytes});
      },
      mad.message);
  return {};
}

DecodeError decode_cm_mad(std::span<const uint8_t> in, CmMad& out) {
  if (in.size() < kMadBytes) return DecodeError::kTruncated;
  if (in.size() > kMadBytes) return DecodeError::kTrailingBytes;
  const MadHeader header = decode_mad_header(in.first<kMadHeaderBytes>());
  if (DecodeError error = check_header(header); error != DecodeError::kNone) {
    return error;
  }
  CmMad mad;
  mad.transaction_id = header.transaction_id;
  mad.attribute_modifier = header.attribute_modifier;
  mad.message = kBodyDecoders[header.attribute_id - kFirstAttribute](
      in.data() + kMadHeaderBytes);
  if (overlong_length(mad.message)) return DecodeError::kBadLength;
  out = mad;
  return DecodeError::kNone;
}

}  // namespace softverbs::cm
