// Encoding and decoding of whole IBA packets. One bounds-checked codec, used
// by every wire, by capture and by the fuzzer.
//
// Frame formats:
//  - IB ("local"/"global"): LRH [GRH] BTH [ext headers] payload pad ICRC.
//    The shm and loopback wires carry these. The VCRC (link-level) is not
//    carried: nothing between soft ports can corrupt a frame unseen except
//    an injected fault, which the ICRC catches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "emulator/packet/headers.h"

namespace softverbs::packet {

constexpr size_t kLrhBytes = 8;
constexpr size_t kGrhBytes = 40;
constexpr size_t kBthBytes = 12;
constexpr size_t kIcrcBytes = 4;
// The largest IB frame for a 4096-byte MTU: LRH GRH BTH AtomicETH payload
// pad ICRC, rounded up.
constexpr size_t kMaxFrameBytes = 4096 + 128;

// Bytes of the extension headers that `opcode` carries after the BTH.
size_t extension_header_bytes(Opcode opcode);

// Size of the IB frame that encode_ib() would produce.
size_t ib_frame_size(const Headers& headers, size_t payload_bytes);

// Bytes before the payload in an IB frame (LRH [GRH] BTH extension headers):
// where a sender may place the payload in its frame buffer ahead of
// encode_ib() to save a copy.
size_t ib_header_bytes(const Headers& headers);

// Writes one IB frame into `out`, filling the derived fields itself: LRH
// lnh/pkt_len, GRH pay_len, BTH pad_count, and the ICRC. Returns the frame
// size, or 0 when `out` is too small or the opcode is unknown.
// Also 0 when a payload is given to an opcode that carries none, or when
// the frame would exceed what the LRH's 11-bit PktLen can describe.
// Fields wider than their wire field (24-bit QPNs and PSNs, 4-bit VL...)
// are cut to it. `payload` may overlap `out`, e.g. already sit at offset
// ib_header_bytes(headers). No allocation.
//
// kOmitted leaves the ICRC field zero (encode) or unchecked (decode): for a
// frame that never leaves the private memory of the process that made it
// (emulator/same_host/local_delivery.h), where nothing can corrupt it on the way.
enum class Icrc : uint8_t { kComputed, kOmitted };
size_t encode_ib(const Headers& headers, std::span<const uint8_t> payload,
                 std::span<uint8_t> out, Icrc icrc = Icrc::kComputed);

// The 40 bytes of a GRH as on the wire (a UD receive buffer starts with them).
void encode_grh(const Grh& grh, std::span<uint8_t, kGrhBytes> out);

enum class DecodeError : uint8_t {
  kNone,
  kTruncated,      // shorter than its headers say
  kBadLrh,         // LVer/LNH not IBA, pkt_len disagrees with the frame
  kBadGrh,         // IP version / next header wrong, pay_len disagrees
  kUnknownOpcode,
  kBadTver,
  kBadPad,         // pad bytes beyond the payload
  kBadIcrc,
  kUnexpectedPayload,  // bytes after the headers of an opcode without payload
};

const char* to_string(DecodeError error);

struct DecodedPacket {
  Headers headers;
  std::span<const uint8_t> payload;  // views into the input frame
};

// Parses and checks one IB frame (ICRC included). Never reads outside `in`.
// `in` must be exactly one frame: LRH PktLen words. Reserved fields are not
// checked (IBTA: ignored on receive) but the ICRC covers them. On an error
// `out` holds whatever had been parsed by then. No allocation.
DecodeError decode_ib(std::span<const uint8_t> in, DecodedPacket& out,
                      Icrc icrc = Icrc::kComputed);

}  // namespace softverbs::packet
