// The common MAD header (IBTA Vol 1, 13.4.2 "Management Datagram Format"):
// the first 24 bytes of every 256-byte management datagram. The CM's messages
// (cm_messages.h) ride in the 232 bytes that follow it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace softverbs::cm {

constexpr size_t kMadBytes = 256;
constexpr size_t kMadHeaderBytes = 24;
constexpr size_t kMadDataBytes = kMadBytes - kMadHeaderBytes;  // 232

constexpr uint8_t kMadBaseVersion = 1;
constexpr uint8_t kMgmtClassCm = 0x07;     // Communication Management
constexpr uint8_t kCmClassVersion = 2;     // what the IBTA 1.2+ CM and Linux speak
constexpr uint8_t kMadMethodSend = 0x03;   // every CM message is a Send
constexpr uint8_t kMadMethodResponseBit = 0x80;

// Host-order values of the header's fields. Layout, big-endian:
//   byte 0 BaseVersion, 1 MgmtClass, 2 ClassVersion, 3 R(1) Method(7),
//   4-5 Status, 6-7 ClassSpecific, 8-15 TransactionID, 16-17 AttributeID,
//   18-19 reserved, 20-23 AttributeModifier.
struct MadHeader {
  uint8_t base_version = kMadBaseVersion;
  uint8_t mgmt_class = kMgmtClassCm;
  uint8_t class_version = kCmClassVersion;
  uint8_t method = kMadMethodSend;  // the R bit (0x80) included
  uint16_t status = 0;
  uint16_t class_specific = 0;
  uint64_t transaction_id = 0;
  uint16_t attribute_id = 0;
  uint32_t attribute_modifier = 0;

  bool operator==(const MadHeader&) const = default;
};

// Writes the 24 header bytes; the reserved bytes 18-19 are zero.
void encode_mad_header(const MadHeader& header,
                       std::span<uint8_t, kMadHeaderBytes> out);

// Reads the 24 header bytes; checks nothing (the caller decides which
// class, version and method it accepts).
MadHeader decode_mad_header(std::span<const uint8_t, kMadHeaderBytes> in);

}  // namespace softverbs::cm
