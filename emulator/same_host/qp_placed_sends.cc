// A QP as the target of placed SENDs (placed_send.h): what it publishes for
// initiators beside its target entry, and how its intake takes the SENDs
// they placed.
#include <algorithm>
#include <atomic>
#include <shared_mutex>

#include "emulator/objects/mr.h"
#include "emulator/objects/qp_impl.h"
#include "emulator/same_host/placed_send.h"
#include "emulator/trace/protocol_events.h"

namespace softverbs {
namespace {

// Process-wide, so a QP that reuses a destroyed one's number never takes
// the SENDs placed on that one.
uint32_t next_generation() {
  static std::atomic<uint32_t> generation{1};
  return generation.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

void QpImpl::start_placed_sends() {
  placed_generation = next_generation();
  placed_send_max = kPlacedSendMaxBytes;
  placed_sends_taken = posted_published = taken_published = 0;
  placement_refused = receive_flush_deferred = placed_sends_stopped = false;
  receives_lkey = 0;
  receives_mixed_lkeys = false;
  checked_receive_memory = {};
  sends_placed_at_error = 0;
  if (!target_receives) return;
  // Closed now (created, or in RESET under the entry's lock): no initiator
  // places a SEND until the entry opens with the new generation.
  shared_field(target_entry->sends_placed).store(0, std::memory_order_relaxed);
  shared_field(target_receives->posted).store(0, std::memory_order_release);
  shared_field(target_receives->taken_by_packets).store(0, std::memory_order_release);
  shared_field(target_receives->sends_taken).store(0, std::memory_order_release);
}

void QpImpl::publish_receives() {
  if (!target_receives || srq) return;
  // Each count stored only when it moved: a receive a placed SEND took
  // moves neither (the initiator counted it in the entry's sends_placed).
  const auto posted = static_cast<uint32_t>(rq.tail);
  const uint32_t by_packets = static_cast<uint32_t>(rq.head) - placed_sends_taken;
  if (by_packets != taken_published) {
    taken_published = by_packets;
    shared_field(target_receives->taken_by_packets).store(by_packets, std::memory_order_release);
  }
  if (posted != posted_published) {
    posted_published = posted;
    shared_field(target_receives->posted).store(posted, std::memory_order_release);
  }
}

namespace {

// Remembers the MR of `lkey`, which a receive of `qp` just checked out
// against, when it is plain pinned memory of the QP's PD with local write.
void remember_checked_memory(QpImpl& qp, uint32_t lkey) {
  const Hca::Impl& hca = qp.hca->impl();
  std::shared_lock lock(hca.mr_mutex);
  const Mr* mr = hca.find_mr_locked(lkey);
  if (!mr || mr->kind() != MrKind::kMemory || mr->on_demand() || &mr->pd() != qp.pd ||
      !(mr->access() & kAccessLocalWrite))
    return;
  qp.checked_receive_memory = {lkey, mr->iova(), mr->length()};
}

// Whether a SEND scattered into the receive WQE at `index` of `qp` would
// find its memory (local write, the QP's PD, inside the MRs).
bool receive_checks_out(QpImpl& qp, uint64_t index) {
  const Sge* sges = qp.rq.sges_at(index);
  const uint32_t count = qp.rq.at(index).num_sge;
  const QpImpl::CheckedReceiveMemory& known = qp.checked_receive_memory;
  auto within_known = [&](const Sge& s) {
    return s.lkey == known.lkey && s.addr >= known.iova && s.length <= known.length &&
           s.addr - known.iova <= known.length - s.length;
  };
  if (known.lkey != 0 && std::all_of(sges, sges + count, within_known)) return true;
  RunFrame pieces;
  if (qp.describe_destination(sges, count, 0, qp.rq.at(index).length, pieces) !=
      WcStatus::kSuccess)
    return false;
  if (count != 0) remember_checked_memory(qp, sges[0].lkey);
  return true;
}

}  // namespace

void QpImpl::note_receive_posted(uint64_t index) {
  if (!target_receives || srq) return;
  const uint64_t length = rq.at(index).length;
  const Sge* sges = rq.sges_at(index);
  for (uint32_t i = 0; i < rq.at(index).num_sge; ++i) {
    if (receives_lkey == 0) receives_lkey = sges[i].lkey;
    receives_mixed_lkeys = receives_mixed_lkeys || sges[i].lkey != receives_lkey;
  }
  const bool refuse = !placement_refused && !receive_checks_out(*this, index);
  if (refuse || length < placed_send_max) {
    // The entry promises no more than this receive holds before the count
    // says it is there.
    TargetEntryScope scope(*this);
    placement_refused = placement_refused || refuse;
    placed_send_max = static_cast<uint32_t>(std::min<uint64_t>(length, placed_send_max));
  }
  publish_receives();
}

void QpImpl::recheck_receives(uint32_t lkey) {
  if (checked_receive_memory.lkey == lkey) checked_receive_memory = {};
  if (!target_receives || srq || placement_refused) return;
  if (!receives_mixed_lkeys && receives_lkey != lkey) return;
  for (uint64_t n = rq.head; n != rq.tail; ++n) {
    const Sge* sges = rq.sges_at(n);
    const bool names_it = std::any_of(sges, sges + rq.at(n).num_sge,
                                      [&](const Sge& s) { return s.lkey == lkey; });
    if (!names_it || receive_checks_out(*this, n)) continue;
    TargetEntryScope scope(*this);
    placement_refused = true;
    return;
  }
}

void QpImpl::receive_placed_send(const packet::DecodedPacket& pkt,
                                 const PlacedSendPrefix& prefix) {
  const packet::OpcodeInfo& info =
      packet::opcode_info(static_cast<uint8_t>(pkt.headers.bth.opcode));
  const bool fits = info.name && type == QpType::kRc &&
                    info.transport == packet::transport_of(type) && info.is_request &&
                    info.operation == packet::Operation::kSend &&
                    info.position == packet::Position::kOnly &&
                    !(info.headers & packet::kHdrIeth) && pkt.headers.bth.pkey == kDefaultPkey;
  // Placed before ERR: taken before the flush.
  const bool takes = can_receive() || receive_flush_deferred;
  if (!fits || !takes || !target_receives || prefix.generation != placed_generation ||
      placed_sends_stopped) {
    ++counters.placed_sends_dropped;
    return;
  }
  // Bytes replayed in the ring: one taken already.
  if (static_cast<int32_t>(prefix.ordinal - placed_sends_taken) < 0) {
    ++counters.placed_sends_dropped;
    return;
  }
  if (prefix.ordinal != placed_sends_taken) {
    lose_placed_sends();
    ++counters.placed_sends_dropped;
    return;
  }
  ++counters.packets_received;
  ++counters.placed_sends_taken;
  trace::packet_received(*this, pkt.headers);
  // Counted before its receive retires, so the published count stays.
  ++placed_sends_taken;
  responder.receive_placed(pkt, info);
  shared_field(target_receives->sends_taken).store(placed_sends_taken, std::memory_order_release);
  if (receive_flush_deferred && placed_sends_taken == sends_placed_at_error)
    end_deferred_receive_flush();
}

void QpImpl::lose_placed_sends() {
  ++counters.placed_sends_lost;
  stop_placed_sends();
}

void QpImpl::stop_placed_sends() {
  placed_sends_stopped = true;
  if (attr.state == QpState::kErr) {
    end_deferred_receive_flush();
    return;
  }
  enter_error();
  raise(AsyncEventType::kQpFatal);
}

bool QpImpl::placed_sends_missing() {
  if (!target_entry || placed_sends_stopped || !(can_receive() || receive_flush_deferred))
    return false;
  return shared_field(target_entry->sends_placed).load(std::memory_order_relaxed) !=
         placed_sends_taken;
}

void QpImpl::flush_receives_or_defer() {
  // Under the entry's lock (enter_error's scope): no SEND is placed after
  // this count, and the scope's end closes the entry.
  const uint32_t placed =
      target_entry ? shared_field(target_entry->sends_placed).load(std::memory_order_relaxed)
                   : placed_sends_taken;
  if (srq || placed_sends_stopped || placed == placed_sends_taken) {
    responder.flush();
    return;
  }
  receive_flush_deferred = true;
  sends_placed_at_error = placed;
  engine->defer_receive_flush(*this);
}

void QpImpl::end_deferred_receive_flush() {
  if (!receive_flush_deferred) return;
  receive_flush_deferred = false;
  responder.flush();
}

void Hca::Impl::recheck_receives(uint32_t lkey) {
  std::lock_guard lock(objects_mutex);
  for (QpImpl* qp : qps) {
    if (!qp->target_receives) continue;
    std::lock_guard qp_lock(qp->mutex);
    qp->recheck_receives(lkey);
  }
}

}  // namespace softverbs
