// SENDs placed by the initiator: between processes of one host, an RC SEND
// that fits one packet and finds a receive WQE waiting is accepted by the
// initiator itself on the target's QP entry (target_table_layout.h), as
// an HCA's responder would accept it, and completes at once, with no ACK.
// Under the entry's lock the initiator checks what the responder would
// (the QP open to it, the PSN the one expected, a receive posted that is
// not spoken for and long enough for the message), pushes the packet into
// the target's mailbox behind a prefix that marks it accepted, counts the
// receive as taken, and moves the entry's PSN and MSN past it. The
// target's intake takes the frame like any other, in the order of the
// ring, and its responder scatters it into the receive WQE and completes
// it without a PSN check or an answer (qp_placed_sends.cc).
//
// Anything that does not check out (no receive free, the entry held, the
// ring full or holding frames of ours) sends the SEND as packets instead,
// where the responder gives RNR and every error as before.
//
// A placed frame: a 16-byte prefix, then the IB packet, its ICRC field 0.
//   0  marker 0xfe (an LRH with LVer 14: no IB decoder takes it for a packet)
//   1  version
//   2  reserved (u16, 0)
//   4  generation (u32, host order): the target QP's life it was accepted in
//   8  checksum (u32): CRC-32C (crc32c.h) of the packet, the generation
//      and the ordinal
//   12 ordinal (u32): how many SENDs were placed on the QP in this life
//      before this one. The target takes them in this order: a gap says
//      that some were lost in the ring (a process scribbled over it), a
//      repeat that bytes were replayed.
// The checksum stands in for the ICRC, which would cost the two sides four
// times as long on a short SEND: both drop bytes that a scribbling process
// spoilt in the ring, and no fault plan or capture sees a placed frame.
#pragma once

#include <cstdint>
#include <span>

namespace softverbs {

inline constexpr uint8_t kPlacedSendMarker = 0xfe;
inline constexpr uint8_t kPlacedSendVersion = 1;
inline constexpr size_t kPlacedSendPrefixBytes = 16;
// The longest SEND placed: one packet at the largest MTU.
inline constexpr uint32_t kPlacedSendMaxBytes = 4096;

inline bool is_placed_send_frame(std::span<const uint8_t> frame) {
  return frame.size() > kPlacedSendPrefixBytes && frame[0] == kPlacedSendMarker;
}

// The checksum's state over the packet (the frame past its prefix), taken
// before the generation is known.
uint32_t placed_packet_checksum(std::span<const uint8_t> packet);
struct PlacedSendPrefix {
  uint32_t generation = 0;
  uint32_t ordinal = 0;
};
// Writes the prefix into the first kPlacedSendPrefixBytes of `frame`;
// `packet_checksum` is placed_packet_checksum() of the rest.
void write_placed_send_prefix(std::span<uint8_t> frame, const PlacedSendPrefix& prefix,
                              uint32_t packet_checksum);
// The packet of a placed frame and what its prefix says; false when the
// prefix is not one this version writes or the checksum fails.
bool read_placed_send_frame(std::span<const uint8_t> frame, std::span<const uint8_t>& packet,
                            PlacedSendPrefix& prefix);

// What an initiator QP keeps of its target's receive counts
// (TargetQpReceives), for the life (generation) of the target QP it read
// them in.
struct ReceivesView {
  bool valid = false;
  uint32_t generation = 0;
  uint32_t posted = 0;
  uint32_t taken_by_packets = 0;
  // This QP sent receive-taking messages as packets since it read
  // taken_by_packets.
  bool taken_stale = true;
};

struct PlacedSend {
  uint32_t initiator_key = 0;  // target_qp_key() of the initiating QP
  uint32_t device_index = 0;   // the target QP
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint32_t length = 0;         // of the message
  ReceivesView* view = nullptr;  // the initiator's, brought up to date as needed
};

enum class PlacedResult {
  kPlaced,
  kNotNow,   // as packets this time: the entry, its receives or the ring said no
  kNotHere,  // as packets: this target takes no placed SENDs now
};

// Pushes the frame with the prefix it is to carry; true once it is in the
// target's ring.
class PlacedFramePusher {
 public:
  virtual ~PlacedFramePusher() = default;
  virtual bool push(const PlacedSendPrefix& prefix) = 0;
};

// `area` is the target's (SameHost::direct_target).
PlacedResult place_send(std::span<uint8_t> area, const PlacedSend& send,
                        PlacedFramePusher& pusher);

}  // namespace softverbs
