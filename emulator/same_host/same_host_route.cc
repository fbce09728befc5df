// The choices of a QP's same-host route (same_host_route.h).
#include "emulator/same_host/same_host_route.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "emulator/objects/qp_impl.h"
#include "emulator/packet/codec.h"
#include "emulator/same_host/direct_execution.h"
#include "emulator/same_host/placed_send.h"
#include "emulator/same_host/same_host.h"
#include "emulator/wire/shm_mailbox_layout.h"

namespace softverbs {
namespace {

// A WRITE or READ up to this size may be executed on the target directly:
// the copy runs in the posting thread, so a larger one goes as a run,
// whose copy the target makes.
constexpr uint64_t kDirectMaxBytes = 4u << 20;

// Below this size, packets cost a target that is serving packets anyway
// less than a cross-memory copy costs the initiator: a WRITE or READ that
// small is executed directly only on a target that would have to be woken
// (its progress thread asleep, no application thread polling), and never
// waits for packets in flight to do so. From this size on (that of runs)
// the one copy always wins. (Neither rule holds where the copy is a memcpy:
// within one process, or into an MR whose pages the target shares.)
constexpr uint64_t kDirectAlwaysBytes = 16 * 1024;
// More WRs than this started since the application last polled the send
// CQ make a stream (a bandwidth loop posting ahead): its short WRITEs and
// READs go as packets, which the target serves while this side posts the
// next, instead of each costing this side a cross-memory copy. A program
// that waits for each (a latency loop) polls in between.
constexpr uint32_t kStreamStarts = 16;

// How many WRITEs and READs go as packets before direct execution is tried
// again after it failed, at first and at most; and how many WQEs that must
// do without a system call go as packets to an R_Key that needed one.
constexpr uint32_t kDirectProbeFirst = 8;
constexpr uint32_t kDirectProbeMost = 4096;

// The interval after another failure, from the one before (0: none yet).
uint32_t next_probe_interval(uint32_t interval) {
  return interval == 0 ? kDirectProbeFirst : std::min(interval * 2, kDirectProbeMost);
}

// A SEND or WRITE with at least this much left goes as a run (one frame,
// payload pulled by the receiver with one copy) where the wire allows.
constexpr uint64_t kRunMinBytes = 16 * 1024;

bool is_atomic_opcode(WrOpcode op) {
  return op == WrOpcode::kAtomicCmpSwp || op == WrOpcode::kAtomicFetchAdd ||
         op == WrOpcode::kAtomicWrite;
}

DirectKind direct_kind(WrOpcode op) {
  switch (op) {
    case WrOpcode::kRdmaRead: return DirectKind::kRead;
    case WrOpcode::kAtomicCmpSwp: return DirectKind::kCompareSwap;
    case WrOpcode::kAtomicFetchAdd: return DirectKind::kFetchAdd;
    case WrOpcode::kAtomicWrite: return DirectKind::kAtomicWrite;
    default: return DirectKind::kWrite;
  }
}

}  // namespace

void SameHostRoute::reset() {
  direct_working_ = true;
  direct_probe_in_ = direct_probe_interval_ = 0;
  placed_pause_ = placed_pause_interval_ = 0;
  receives_view_ = ReceivesView{};
  placed_target_ = PeerTargetArea{};
}

SameHostRoute::Travel SameHostRoute::choose(const SendWqe& w, bool quiet) {
  // Only with nothing outstanding, as below: the target's responder has
  // taken every earlier request, and its entry stands where this one starts.
  if (w.is_send()) {
    if (quiet && placeable_send(w)) return Travel::kDirect;
    receives_view_.taken_stale = true;  // it takes a receive as packets
    return Travel::kPackets;
  }
  if (w.opcode == WrOpcode::kRdmaWriteWithImm) receives_view_.taken_stale = true;
  if (!direct_fits(w)) return Travel::kPackets;
  // A short one in a stream only if the copy is a memcpy; an atomic only
  // on a word mapped here; the bytes of a WRITE with immediate only where
  // they are a memcpy (its target is woken for the completion anyway, and
  // a long one's run costs that target the same system call).
  direct_without_call_only_ =
      is_atomic_opcode(w.opcode) || w.opcode == WrOpcode::kRdmaWriteWithImm ||
      (w.length < kDirectAlwaysBytes && streaming() && !target_in_this_process());
  if (direct_without_call_only_ && keeps_to_packets(w)) return Travel::kPackets;
  // Only with nothing outstanding: then the responder has taken every
  // earlier request, and this one is next in its order as on the wire.
  if (quiet) return Travel::kDirect;
  if (w.length < kDirectAlwaysBytes) return Travel::kPackets;
  // Behind a SEND or an atomic it goes as packets, as an HCA would send it
  // at once (a WQE held here has not begun, which SQD would see).
  if ((direct_working_ || direct_probe_in_ == 0) && only_one_sided_outstanding() &&
      !qp_.engine->same_host().direct_target(qp_.destination()).bytes.empty())
    return Travel::kAfterAcks;  // the acknowledgement runs the requester again
  if (direct_probe_in_ != 0) --direct_probe_in_;
  return Travel::kPackets;
}

bool SameHostRoute::direct_fits(const SendWqe& w) const {
  return qp_.type == QpType::kRc && qp_.attr.state == QpState::kRts &&
         (w.opcode == WrOpcode::kRdmaWrite || w.opcode == WrOpcode::kRdmaRead ||
          is_atomic_opcode(w.opcode) || placeable(w)) &&
         w.length <= kDirectMaxBytes &&
         // An atomic's original value needs exactly 8 bytes (else the
         // packets' LOC_LEN_ERR).
         (!w.is_atomic() || w.length == sizeof(uint64_t)) && qp_.port_up() &&
         !qp_.migration_in_use() && qp_.engine->same_host().direct_possible();
}

bool SameHostRoute::placeable(const SendWqe& w) const {
  // Its run frame must stand for the whole message, in one window.
  return w.opcode == WrOpcode::kRdmaWriteWithImm && w.length != 0 &&
         qp_.requester.packets_of(w) <= qp_.requester.window().packets();
}

bool SameHostRoute::placeable_send(const SendWqe& w) {
  // SEND with invalidate stays on packets: its window is the responder's
  // to check, and a refusal must reach this side.
  if (w.opcode != WrOpcode::kSend && w.opcode != WrOpcode::kSendWithImm) return false;
  SameHost& same_host = qp_.engine->same_host();
  // A QP of this process takes its SENDs by local delivery, asked without
  // a look into the registry.
  if (qp_.type != QpType::kRc || qp_.attr.state != QpState::kRts ||
      w.length > kPlacedSendMaxBytes || w.length > qp_.mtu() || !qp_.port_up() ||
      qp_.migration_in_use() || !same_host.placed_sends_possible() ||
      same_host.delivers_locally(qp_.destination()))
    return false;
  if (placed_pause_ == 0) return true;
  --placed_pause_;
  return false;
}

void SameHostRoute::placed_declined() {
  placed_pause_interval_ = next_probe_interval(placed_pause_interval_);
  placed_pause_ = placed_pause_interval_;
}

bool SameHostRoute::place_send(const SendWqe& w, uint64_t index, const packet::Headers& h) {
  if (try_placing(w, index, h)) return true;
  receives_view_.taken_stale = true;  // it takes a receive as packets
  return false;
}

std::span<uint8_t> SameHostRoute::encode_placed(const SendWqe& w, uint64_t index,
                                                const packet::Headers& h, std::span<uint8_t> frame,
                                                uint32_t& checksum) const {
  const size_t header_bytes = packet::ib_header_bytes(h);
  if (kPlacedSendPrefixBytes + header_bytes + w.length + packet::kIcrcBytes > frame.size())
    return {};
  const std::span<uint8_t> packet_room = frame.subspan(kPlacedSendPrefixBytes);
  const std::span<uint8_t> payload = packet_room.subspan(header_bytes, w.length);
  if (w.inline_len)
    std::memcpy(payload.data(), qp_.sq.inline_at(index), w.length);
  else if (qp_.gather(qp_.sq.sges_at(index), w.num_sge, 0, payload) != WcStatus::kSuccess)
    return {};
  const size_t packet_bytes = packet::encode_ib(h, payload, packet_room, packet::Icrc::kOmitted);
  if (packet_bytes == 0) return {};
  checksum = placed_packet_checksum(packet_room.first(packet_bytes));
  return frame.first(kPlacedSendPrefixBytes + packet_bytes);
}

bool SameHostRoute::try_placing(const SendWqe& w, uint64_t index, const packet::Headers& h) {
  SameHost& same_host = qp_.engine->same_host();
  const WireAddress dst = qp_.destination();
  // Kept while pushes into the ring beside it succeed: each push asks the
  // registry again whether that ring still serves `dst`.
  if (placed_target_.bytes.empty()) placed_target_ = same_host.placed_target(dst);
  const PeerTargetArea& target = placed_target_;
  // A QP of this process takes its SENDs by local delivery.
  if (target.bytes.empty() || target.same_process) {
    placed_target_ = PeerTargetArea{};
    placed_declined();
    return false;
  }
  std::array<uint8_t, kShmMaxFrameBytes> frame;
  uint32_t checksum = 0;
  const std::span<uint8_t> whole = encode_placed(w, index, h, frame, checksum);
  if (whole.empty()) return false;

  struct Pusher final : PlacedFramePusher {
    SameHost& same_host;
    const WireAddress& dst;
    const PeerTargetArea& target;
    std::span<uint8_t> frame;
    uint32_t checksum;
    Pusher(SameHost& s, const WireAddress& d, const PeerTargetArea& t, std::span<uint8_t> f,
           uint32_t c)
        : same_host(s), dst(d), target(t), frame(f), checksum(c) {}
    bool push(const PlacedSendPrefix& prefix) override {
      write_placed_send_prefix(frame, prefix, checksum);
      return same_host.push_placed(dst, target, frame);
    }
  } pusher(same_host, dst, target, whole, checksum);
  const PlacedSend send{
      .initiator_key = target_qp_key(qp_.device_index, qp_.qpn),
      .device_index = qp_.peer_device_index,
      .qpn = qp_.attr.dest_qp_num,
      .psn = h.bth.psn,
      .length = static_cast<uint32_t>(w.length),
      .view = &receives_view_,
  };
  const PlacedResult result = softverbs::place_send(target.bytes, send, pusher);
  if (result == PlacedResult::kPlaced) {
    placed_pause_interval_ = 0;
    return true;
  }
  placed_target_ = PeerTargetArea{};  // asked again next time
  if (result == PlacedResult::kNotHere) placed_declined();
  return false;
}

bool SameHostRoute::target_in_this_process() {
  return qp_.engine->same_host().direct_target(qp_.destination()).same_process;
}

bool SameHostRoute::streaming() {
  const uint64_t polls = qp_.send_cq->impl().polls.load(std::memory_order_relaxed);
  if (polls != polls_seen_) {
    polls_seen_ = polls;
    starts_since_poll_ = 0;
  }
  return ++starts_since_poll_ > kStreamStarts;
}

bool SameHostRoute::only_one_sided_outstanding() const {
  const SendQueue& sq = qp_.sq;
  for (uint64_t n = sq.head; n != sq.next; ++n) {
    const SendWqe& w = sq.at(n);
    if (!w.done && w.opcode != WrOpcode::kRdmaWrite && w.opcode != WrOpcode::kRdmaRead)
      return false;
  }
  return true;
}

bool SameHostRoute::keeps_to_packets(const SendWqe& w) {
  if (w.rkey != rkey_needing_call_ || rkey_packets_left_ == 0) return false;
  --rkey_packets_left_;
  return true;
}

void SameHostRoute::rkey_needed_call(uint32_t rkey) {
  if (rkey != rkey_needing_call_) rkey_recheck_interval_ = 0;
  rkey_recheck_interval_ = next_probe_interval(rkey_recheck_interval_);
  rkey_needing_call_ = rkey;
  rkey_packets_left_ = rkey_recheck_interval_;
}

void SameHostRoute::rkey_worked(uint32_t rkey) {
  if (rkey != rkey_needing_call_) return;
  rkey_needing_call_ = 0;
  rkey_recheck_interval_ = 0;
}

void SameHostRoute::direct_declined() {
  direct_working_ = false;
  direct_probe_interval_ = next_probe_interval(direct_probe_interval_);
  direct_probe_in_ = direct_probe_interval_;
}

bool SameHostRoute::execute(const SendWqe& w, uint64_t index, uint32_t psn,
                            uint64_t& original) {
  SameHost& same_host = qp_.engine->same_host();
  const PeerTargetArea target = same_host.direct_target(qp_.destination());
  if (target.bytes.empty()) {
    direct_declined();
    return false;
  }
  // A short one for an attentive target only if the copy is a memcpy.
  const bool without_call_only = direct_without_call_only_ || (w.length < kDirectAlwaysBytes &&
                                                               target.attentive &&
                                                               !target.same_process);
  if (without_call_only && w.rkey == rkey_needing_call_ && rkey_packets_left_ != 0) return false;
  const DirectKind kind = direct_kind(w.opcode);
  RunFrame local;  // its pieces: where the bytes are in this process
  // WRITE (with immediate too) and READ: the SGEs' pieces; the packets
  // report SGEs that do not check out.
  if ((kind == DirectKind::kRead || kind == DirectKind::kWrite) &&
      !describe_local(w, index, local))
    return false;
  const bool atomic_write = kind == DirectKind::kAtomicWrite;
  const DirectOperation op{
      .kind = kind,
      .initiator_key = target_qp_key(qp_.device_index, qp_.qpn),
      .device_index = qp_.peer_device_index,
      .qpn = qp_.attr.dest_qp_num,
      .psn = psn,
      .packets = qp_.requester.packets_of(w),
      .rkey = w.rkey,
      .va = w.remote_addr,
      // An atomic names one word, whatever its local buffer holds.
      .length = is_atomic_opcode(w.opcode) ? sizeof(uint64_t) : w.length,
      .local = std::span<const RunPiece>(local.pieces.data(), local.piece_count),
      .compare_add = atomic_write ? w.atomic_write_data : w.compare_add,
      .swap = w.swap,
      .original = &original,
      .same_process = target.same_process,
      .place_only = w.opcode == WrOpcode::kRdmaWriteWithImm,
      .only_without_system_call = without_call_only,
  };
  switch (execute_directly(target.bytes, op)) {
    case DirectResult::kRefused:
      same_host.refuse_direct();
      direct_declined();
      return false;
    case DirectResult::kNotHere: direct_declined(); return false;
    case DirectResult::kNotYet: return false;
    case DirectResult::kNeedsSystemCall:
      rkey_needed_call(w.rkey);
      return false;
    case DirectResult::kExecuted: break;
  }
  if (without_call_only) rkey_worked(w.rkey);
  direct_working_ = true;
  direct_probe_interval_ = 0;
  return true;
}

bool SameHostRoute::describe_local(const SendWqe& w, uint64_t index, RunFrame& local) const {
  if (w.inline_len) {
    local.pieces[0] = RunPiece{reinterpret_cast<uint64_t>(qp_.sq.inline_at(index)), w.length};
    local.piece_count = 1;
    return true;
  }
  const Sge* sges = qp_.sq.sges_at(index);
  const WcStatus st = w.is_read() ? qp_.describe_destination(sges, w.num_sge, 0, w.length, local)
                                  : qp_.describe(sges, w.num_sge, 0, w.length, local);
  return st == WcStatus::kSuccess;
}

bool SameHostRoute::as_run(const SendWqe& w, uint64_t sent, uint32_t in_flight,
                           uint32_t window) const {
  if (w.inline_len || w.length - sent < kRunMinBytes) return false;
  if (in_flight + 2 > window) return false;
  return qp_.engine->same_host().runs_allowed(qp_.destination());
}

}  // namespace softverbs
