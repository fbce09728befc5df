// The initiator's side of a placed SEND (placed_send.h).
#include "emulator/same_host/placed_send.h"

#include <cstring>

#include "emulator/packet/crc32c.h"
#include "emulator/same_host/target_entry_access.h"

namespace softverbs {

using target_entry_access::lock_entry;
using target_entry_access::target_pid;
using target_entry_access::Unlocker;

namespace {

uint32_t checksum_with(uint32_t packet_checksum, const PlacedSendPrefix& prefix) {
  const uint32_t words[2] = {prefix.generation, prefix.ordinal};
  return ~packet::crc32c_update(packet_checksum, reinterpret_cast<const uint8_t*>(words),
                                sizeof words);
}

}  // namespace

uint32_t placed_packet_checksum(std::span<const uint8_t> packet) {
  return packet::crc32c_update(~0u, packet.data(), packet.size());
}

void write_placed_send_prefix(std::span<uint8_t> frame, const PlacedSendPrefix& prefix,
                              uint32_t packet_checksum) {
  const uint32_t checksum = checksum_with(packet_checksum, prefix);
  frame[0] = kPlacedSendMarker;
  frame[1] = kPlacedSendVersion;
  frame[2] = frame[3] = 0;
  std::memcpy(&frame[4], &prefix.generation, sizeof prefix.generation);
  std::memcpy(&frame[8], &checksum, sizeof checksum);
  std::memcpy(&frame[12], &prefix.ordinal, sizeof prefix.ordinal);
}

bool read_placed_send_frame(std::span<const uint8_t> frame, std::span<const uint8_t>& packet,
                            PlacedSendPrefix& prefix) {
  if (!is_placed_send_frame(frame) || frame[1] != kPlacedSendVersion || frame[2] || frame[3])
    return false;
  uint32_t checksum;
  std::memcpy(&prefix.generation, &frame[4], sizeof prefix.generation);
  std::memcpy(&checksum, &frame[8], sizeof checksum);
  std::memcpy(&prefix.ordinal, &frame[12], sizeof prefix.ordinal);
  packet = frame.subspan(kPlacedSendPrefixBytes);
  return checksum_with(placed_packet_checksum(packet), prefix) == checksum;
}

namespace {

// Whether a receive is free for one more SEND, `placed` having been placed
// in `generation`: by what `view` holds where that is known to suffice,
// else by the counts read again.
bool receive_free(TargetQpReceives& receives, uint32_t generation, uint32_t placed,
                  ReceivesView& view) {
  if (!view.valid || view.generation != generation) {
    view = ReceivesView{.valid = true, .generation = generation};
    view.posted = shared_field(receives.posted).load(std::memory_order_acquire);
  }
  if (view.taken_stale) {
    view.taken_by_packets =
        shared_field(receives.taken_by_packets).load(std::memory_order_acquire);
    view.taken_stale = false;
  }
  auto free = [&] {
    return static_cast<int32_t>(view.posted - view.taken_by_packets - placed) > 0;
  };
  if (free()) return true;
  view.posted = shared_field(receives.posted).load(std::memory_order_acquire);
  return free();
}

}  // namespace

PlacedResult place_send(std::span<uint8_t> area, const PlacedSend& send,
                        PlacedFramePusher& pusher) {
  if (area.size() < sizeof(TargetTableLayout)) return PlacedResult::kNotHere;
  auto& table = *reinterpret_cast<TargetTableLayout*>(area.data());
  if (target_pid(table) == 0 ||
      shared_field(table.header.sends_refused).load(std::memory_order_acquire) != 0)
    return PlacedResult::kNotHere;
  const uint64_t seed = shared_field(table.header.seed).load(std::memory_order_relaxed);

  TargetQpEntry seen;
  TargetQpEntry* qp = lock_entry(
      table.qps, target_qp_key(send.device_index, send.qpn), seen, [&](const TargetQpEntry& e) {
        return sealed(e, seed) && e.open == 1 && e.peer_key == send.initiator_key;
      });
  Unlocker<TargetQpEntry> unlock{qp};
  if (!qp) return PlacedResult::kNotNow;
  if (seen.takes_sends != 1) return PlacedResult::kNotHere;
  if (seen.expected_psn != send.psn || send.length > seen.send_max) return PlacedResult::kNotNow;
  // A receive WQE posted and taken neither by a packet nor by a SEND placed
  // before (the counts wrap; the difference is what is free).
  TargetQpReceives& receives = table.receives[qp - table.qps];
  const uint32_t placed = shared_field(qp->sends_placed).load(std::memory_order_relaxed);
  if (!receive_free(receives, seen.generation, placed, *send.view)) return PlacedResult::kNotNow;
  if (!pusher.push({.generation = seen.generation, .ordinal = placed}))
    return PlacedResult::kNotNow;
  shared_field(qp->sends_placed).store(placed + 1, std::memory_order_relaxed);
  target_entry_access::advance_past_message(*qp, seen, send.psn, 1, seed, false);
  return PlacedResult::kPlaced;
}

}  // namespace softverbs
