// A QP's entry in the target table: kept in step with its responder.
#include "emulator/objects/qp_impl.h"
#include "emulator/same_host/target_table.h"
#include "emulator/sync/shared_lock_word.h"

namespace softverbs {

TargetEntryScope::TargetEntryScope(QpImpl& qp) {
  TargetQpEntry* e = qp.target_entry;
  if (!e || qp.target_entry_held) return;
  shared_lock_word::lock(e->lock);
  qp.target_entry_held = true;
  qp_ = &qp;
  // While open, the entry leads: initiators moved it on. Scribbled over,
  // it says nothing.
  const TargetQpEntry seen = snapshot(*e);
  if (seen.open == 1 && sealed(seen, qp.engine->same_host().target_table().seed()))
    qp.responder.adopt({seen.expected_psn, seen.msn});
  qp.counters.executed_by_initiators += e->executed - qp.target_executed_seen;
  qp.target_executed_seen = e->executed;
}

TargetEntryScope::~TargetEntryScope() {
  if (!qp_) return;
  QpImpl& qp = *qp_;
  TargetQpEntry* e = qp.target_entry;
  // The key too: a stray write may have cleared it.
  shared_field(e->key).store(target_qp_key(qp.device_index, qp.qpn), std::memory_order_relaxed);
  const Responder::Position p = qp.responder.position();
  e->expected_psn = p.expected_psn;
  e->msn = p.msn;
  e->access_flags = qp.attr.access_flags;
  e->pd = reinterpret_cast<uint64_t>(qp.pd);
  e->peer_key = target_qp_key(qp.peer_device_index, qp.attr.dest_qp_num);
  // With an SRQ a receive is not this QP's to promise.
  e->takes_sends =
      !qp.srq && !qp.placement_refused && qp.engine->same_host().takes_placed_sends() ? 1 : 0;
  e->send_max = qp.placed_send_max;
  e->generation = qp.placed_generation;
  // In RTR only once a packet has come: the first request raises COMM_EST.
  const bool state_takes =
      qp.attr.state == QpState::kRts ||
      (qp.attr.state == QpState::kRtr && qp.responder.communication_established());
  e->open =
      state_takes && qp.responder.idle() && !qp.migration_in_use() && qp.port_up() ? 1 : 0;
  reseal(*e, qp.engine->same_host().target_table().seed());
  qp.target_entry_held = false;
  shared_lock_word::unlock(e->lock);
}

QpCounters QpImpl::current_counters() const {
  QpCounters c = counters;
  if (target_entry)
    c.executed_by_initiators +=
        shared_field(target_entry->executed).load(std::memory_order_relaxed) -
        target_executed_seen;
  return c;
}

}  // namespace softverbs
