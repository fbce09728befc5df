// Encoding and decoding of whole CM MADs: the 24-byte MAD header
// (mad_header.h) and one CM message (cm_messages.h), 256 bytes, laid out
// bit for bit as the IBTA defines them so that a kernel CM or a packet
// analyser reads them as its own.
#pragma once

#include <cstdint>
#include <span>

#include "emulator/cm/cm_messages.h"
#include "emulator/cm/mad_header.h"

namespace softverbs::cm {

// A CM message and the MAD header fields that differ between messages; the
// rest of the header is fixed: base version 1, class CM (0x07), class
// version 2, method Send, status 0, class-specific 0.
struct CmMad {
  // Chosen by the sender of a REQ (or DREQ, SIDR_REQ...); the replies
  // carry it back.
  uint64_t transaction_id = 0;
  // 0, except that ECE (Linux 5.8+) carries its options here in a REQ or REP.
  uint32_t attribute_modifier = 0;
  CmMessage message;

  bool operator==(const CmMad&) const = default;
};

enum class EncodeError : uint8_t {
  kNone,
  kValueTooWide,    // a value does not fit its field's bit width
  kLengthTooLarge,  // REJ reject_info_length or SIDR_REP
                    // additional_info_length above 72
};

const char* to_string(EncodeError error);

struct EncodeStatus {
  EncodeError error = EncodeError::kNone;
  const char* field = nullptr;  // the offending field ("primary_path.sl")

  bool ok() const { return error == EncodeError::kNone; }
};

// Writes one 256-byte MAD into `out`. Reserved bits are zero. On an error
// nothing is written. No allocation.
EncodeStatus encode_cm_mad(const CmMad& mad, std::span<uint8_t, kMadBytes> out);

enum class DecodeError : uint8_t {
  kNone,
  kTruncated,         // fewer than 256 bytes
  kTrailingBytes,     // more than 256 bytes
  kBadBaseVersion,    // not 1
  kNotCmClass,        // management class not 0x07
  kBadClassVersion,   // not 2
  kBadMethod,         // not Send
  kUnknownAttribute,  // none of REQ..SIDR_REP (e.g. ClassPortInfo, LAP, APR)
  kBadLength,         // a length field claims more than its area holds
};

const char* to_string(DecodeError error);

// Parses one CM MAD; `in` must be exactly one MAD. Never reads outside
// `in`. Reserved bits, status and class-specific are not checked (ignored
// on receipt). `out` is written only on success. No allocation.
DecodeError decode_cm_mad(std::span<const uint8_t> in, CmMad& out);

}  // namespace softverbs::cm
