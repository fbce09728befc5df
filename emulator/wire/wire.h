// A wire carries IB frames between soft ports. The engine sends through this
// interface and never knows which wire it has, so tests can use an in-memory
// one and faults can be injected in between. How the intake sleeps and is
// woken is the wire's other face, its doorbell (doorbell.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "emulator/types.h"

namespace softverbs {

struct QpImpl;

// Where a frame goes: the destination port (device) and QP. The wire decides
// which process (or host) serves that pair.
struct WireAddress {
  // A RoCE destination whose GID no device of this host owns: the frame
  // goes to another host, found by the DGID in its GRH (routed_wire.h).
  static constexpr uint32_t kOffHost = UINT32_MAX - 1;

  uint32_t device_index = 0;
  uint32_t qpn = 0;
  // The QP that sends the frame, when a QP does (its sending thread holds
  // its lock): what names the frame's conversation for fault decisions
  // (emulator/fault/frame_identity.h). Wires route by the destination and
  // never look at it.
  const QpImpl* sender = nullptr;
};

struct WireCounters {
  uint64_t frames_sent = 0;
  uint64_t frames_received = 0;
  uint64_t frames_deferred = 0;      // destination ring full, held locally
  uint64_t frames_unroutable = 0;    // no live owner for the destination
  // Held frames dropped because their destination stayed full (or broken)
  // past the wire's deadline: RC retransmits them or fails the WR.
  uint64_t frames_dropped_peer_unusable = 0;
  // Shared ring state found breaking the protocol (a counter, sequence
  // word or length no correct peer writes), as producer or consumer.
  uint64_t ring_protocol_violations = 0;
  // The UDP wire (udp_wire.h), between hosts.
  uint64_t udp_datagrams_sent = 0;
  uint64_t udp_datagrams_received = 0;
  uint64_t udp_send_failures = 0;     // the socket refused it (full, no route)
  // Sends that carried several datagrams as one (UDP GSO), and their datagrams.
  uint64_t udp_segmented_sends = 0;
  uint64_t udp_segmented_datagrams = 0;
  // Receives that brought several datagrams coalesced by the kernel (UDP
  // GRO), and their datagrams.
  uint64_t udp_coalesced_receives = 0;
  uint64_t udp_coalesced_datagrams = 0;
  uint64_t udp_dropped_malformed = 0; // truncated, not whole words, not RoCEv2
  uint64_t udp_dropped_bad_icrc = 0;
  // For an address no soft device owns, or a MAD to QP1 that no QP here takes.
  uint64_t udp_dropped_not_here = 0;
};

// Writes one frame into `room` and returns its size; 0 means nothing is sent
// (the slot, if one was taken, is given back or published as empty and skipped).
class FrameWriter {
 public:
  virtual ~FrameWriter() = default;
  virtual size_t write(std::span<uint8_t> room) = 0;
};

class Wire {
 public:
  virtual ~Wire() = default;

  // Hands one frame to the wire. Never blocks. A frame for a destination that
  // has no live owner is dropped and counted (returns false); a lossless wire
  // holds frames it cannot deliver yet and sends them, in order, from poll().
  virtual bool send(const WireAddress& dst, std::span<const uint8_t> frame) = 0;

  // Sends one frame of at most `max_bytes`, written by `writer` directly into
  // the wire's own buffer (on the shm wire: the destination's ring slot).
  // Same results and counting as send(); false also when the writer wrote
  // nothing (or claimed more than its room). `writer` must not call into
  // this wire. The default writes into a private buffer and calls send().
  virtual bool send_with(const WireAddress& dst, size_t max_bytes, FrameWriter& writer);

  // Delivers up to `budget` received frames to `deliver`, and pushes held
  // frames onwards. Returns the number delivered.
  virtual size_t poll(const std::function<void(std::span<const uint8_t>)>& deliver,
                      size_t budget) = 0;

  // Frames this thread sends between begin_burst() and the matching
  // end_burst() may be held back and handed on together when the outermost
  // burst ends (the UDP wire: one system call for many datagrams). Bursts
  // nest; use WireBurst (wire_burst.h) rather than calling these.
  virtual void begin_burst() {}
  virtual void end_burst() {}

  // False only when poll() would surely find nothing to deliver or push on
  // (lets a busy poller skip its locks). Any thread.
  virtual bool may_have_input() const { return true; }

  // A QP of this process joined (or left) multicast group `gid` of a
  // device whose addresses are on the interfaces `ifindexes`: a wire that
  // reaches other hosts joins the group there, and hands what arrives for it
  // to `member_qpn`'s process (this one). Only for IP multicast GIDs.
  virtual void joined_multicast(uint32_t device_index, const Gid& gid, uint32_t member_qpn,
                                std::span<const uint32_t> ifindexes) {}
  virtual void left_multicast(uint32_t device_index, const Gid& gid, uint32_t member_qpn) {}

  // True while frames are held back waiting for room at their destination.
  virtual bool has_deferred() const = 0;

  virtual WireCounters counters() const = 0;
};

}  // namespace softverbs
