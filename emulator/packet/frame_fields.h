// Fields of an IB frame read (or, for DestQP, written) in place, without
// decoding the whole frame: the wires and the capture route and name frames
// the codec made. Each reader checks that the frame is long enough.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "emulator/packet/codec.h"
#include "emulator/types.h"

namespace softverbs::packet {

// LNH 3: a GRH follows the LRH.
inline bool frame_is_global(std::span<const uint8_t> frame) {
  return frame.size() >= kLrhBytes + kGrhBytes && (frame[1] & 0x3) == 3;
}

inline size_t frame_bth_offset(std::span<const uint8_t> frame) {
  return frame_is_global(frame) ? kLrhBytes + kGrhBytes : kLrhBytes;
}

// The BTH's DestQP (bytes 5-7), or 0 when the frame has no whole BTH.
inline uint32_t frame_dest_qp(std::span<const uint8_t> frame) {
  const size_t at = frame_bth_offset(frame) + 5;
  if (frame.size() < at + 3) return 0;
  return uint32_t{frame[at]} << 16 | uint32_t{frame[at + 1]} << 8 | frame[at + 2];
}

// Rewrites DestQP; the ICRC is then the caller's to recompute.
inline void set_frame_dest_qp(std::span<uint8_t> frame, uint32_t qpn) {
  const size_t at = frame_bth_offset(frame) + 5;
  if (frame.size() < at + 3) return;
  frame[at] = static_cast<uint8_t>(qpn >> 16);
  frame[at + 1] = static_cast<uint8_t>(qpn >> 8);
  frame[at + 2] = static_cast<uint8_t>(qpn);
}

// The GRH's SGID and DGID of a global frame (all zero otherwise).
inline Gid frame_sgid(std::span<const uint8_t> frame) {
  Gid gid{};
  if (frame_is_global(frame)) std::memcpy(gid.data(), frame.data() + kLrhBytes + 8, gid.size());
  return gid;
}

inline Gid frame_dgid(std::span<const uint8_t> frame) {
  Gid gid{};
  if (frame_is_global(frame)) std::memcpy(gid.data(), frame.data() + kLrhBytes + 24, gid.size());
  return gid;
}

}  // namespace softverbs::packet
