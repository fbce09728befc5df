// Modify QP, posting, the transitions' side effects, and the QP's packets
// in (qp_transmit.cc: out). The public Qp methods take the QP's lock and
// call these.
#include <algorithm>
#include <cerrno>

#include "emulator/objects/qp_impl.h"
#include "emulator/objects/srq_impl.h"
#include "emulator/same_host/target_table.h"
#include "emulator/trace/protocol_events.h"
#include "emulator/transport/qp_state.h"
#include "emulator/wire/wire.h"

namespace softverbs {
namespace {

// Attribute values a Modify QP may carry, checked before anything changes.
Errno check_values(const QpImpl& qp, const QpAttributes& a, uint32_t mask) {
  const DeviceAttributes& dev = qp.hca->attributes();
  PortAttributes port;
  qp.hca->query_port(1, port);
  const DeviceDescription& device = qp.hca->description();
  if ((mask & kQpAttrPort) && !device.has_port(a.port_num)) return EINVAL;
  if ((mask & kQpAttrPkeyIndex) && a.pkey_index >= port.pkey_tbl_len) return EINVAL;
  if ((mask & kQpAttrPathMtu) &&
      (static_cast<uint8_t>(a.path_mtu) < 1 ||
       static_cast<uint8_t>(a.path_mtu) > static_cast<uint8_t>(port.active_mtu)))
    return EINVAL;
  if ((mask & kQpAttrTimeout) && a.timeout > 31) return EINVAL;
  if ((mask & kQpAttrRetryCnt) && a.retry_cnt > 7) return EINVAL;
  if ((mask & kQpAttrRnrRetry) && a.rnr_retry > 7) return EINVAL;
  if ((mask & kQpAttrMinRnrTimer) && a.min_rnr_timer > 31) return EINVAL;
  if ((mask & kQpAttrMaxQpRdAtomic) && a.max_rd_atomic > dev.max_qp_init_rd_atom) return EINVAL;
  if ((mask & kQpAttrMaxDestRdAtomic) && a.max_dest_rd_atomic > dev.max_qp_rd_atom) return EINVAL;
  if ((mask & kQpAttrRqPsn) && a.rq_psn > packet::kPsnMask) return EINVAL;
  if ((mask & kQpAttrSqPsn) && a.sq_psn > packet::kPsnMask) return EINVAL;
  if ((mask & kQpAttrDestQpn) && a.dest_qp_num > packet::kPsnMask) return EINVAL;
  if (mask & kQpAttrAccessFlags) {
    constexpr uint32_t all = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                             kAccessRemoteAtomic | kAccessFlushGlobal | kAccessFlushPersistent;
    if (a.access_flags & ~all) return EINVAL;
  }
  if (mask & kQpAttrAv) {
    if (a.av.port_num != 0 && !device.has_port(a.av.port_num)) return EINVAL;
    if (a.av.is_global && a.av.sgid_index >= port.gid_tbl_len) return EINVAL;
    // RoCE routes by GID: an address vector without a GRH, or naming an empty
    // source GID, is refused as the kernel's rdma_check_ah_attr does.
    if (port.link_layer == LinkLayer::kEthernet &&
        (!a.av.is_global || a.av.sgid_index >= device.gids.size()))
      return EINVAL;
  }
  if (mask & kQpAttrAltPath) return qp.check_alternate_path(a);
  return 0;
}

// The soft device an address vector leads to. A GID no soft device of this
// host owns is another host's (WireAddress::kOffHost): the UDP wire carries
// its packets, or, without one, the wire drops and counts them.
uint32_t peer_device_of(const AddressVector& av) {
  const DeviceDescription* peer = av.is_global ? find_device_by_gid(av.dgid) : nullptr;
  if (!peer) peer = find_device_by_lid(av.dlid);
  if (!peer && av.is_global) return WireAddress::kOffHost;
  return peer ? peer->index : 0;
}

void copy_attrs(QpAttributes& to, const QpAttributes& a, uint32_t mask) {
  if (mask & kQpAttrAccessFlags) to.access_flags = a.access_flags;
  if (mask & kQpAttrPkeyIndex) to.pkey_index = a.pkey_index;
  if (mask & kQpAttrPort) to.port_num = a.port_num;
  if (mask & kQpAttrQkey) to.qkey = a.qkey;
  if (mask & kQpAttrAv) to.av = a.av;
  if (mask & kQpAttrPathMtu) to.path_mtu = a.path_mtu;
  if (mask & kQpAttrTimeout) to.timeout = a.timeout;
  if (mask & kQpAttrRetryCnt) to.retry_cnt = a.retry_cnt;
  if (mask & kQpAttrRnrRetry) to.rnr_retry = a.rnr_retry;
  if (mask & kQpAttrRqPsn) to.rq_psn = a.rq_psn;
  if (mask & kQpAttrSqPsn) to.sq_psn = a.sq_psn;
  if (mask & kQpAttrMaxQpRdAtomic) to.max_rd_atomic = a.max_rd_atomic;
  if (mask & kQpAttrMaxDestRdAtomic) to.max_dest_rd_atomic = a.max_dest_rd_atomic;
  if (mask & kQpAttrMinRnrTimer) to.min_rnr_timer = a.min_rnr_timer;
  if (mask & kQpAttrDestQpn) to.dest_qp_num = a.dest_qp_num;
  if (mask & kQpAttrEnSqdAsyncNotify) to.en_sqd_async_notify = a.en_sqd_async_notify;
  if (mask & kQpAttrAltPath) {
    to.alt_av = a.alt_av;
    to.alt_pkey_index = a.alt_pkey_index;
    to.alt_port_num = a.alt_port_num;
    to.alt_timeout = a.alt_timeout;
  }
  if (mask & kQpAttrPathMigState) to.path_mig_state = a.path_mig_state;
}

bool sends_allowed(QpState s) {
  // IBTA 10.8.2: posting to the SQ is allowed in RTS, SQD, SQE and ERR
  // (in ERR the WR is flushed); not in RESET, INIT or RTR.
  return s == QpState::kRts || s == QpState::kSqd || s == QpState::kSqe ||
         s == QpState::kErr;
}

bool carries_inline(const SendRequest& wr) {
  return (wr.flags & kWrInline) && takes_inline_data(wr.opcode);
}

bool opcode_allowed(QpType type, WrOpcode op) {
  switch (type) {
    case QpType::kRc:
    case QpType::kXrcSend: return true;
    // UC has no READ, atomics or remote invalidation.
    case QpType::kUc: return op == WrOpcode::kSend || op == WrOpcode::kSendWithImm ||
                             op == WrOpcode::kRdmaWrite || op == WrOpcode::kRdmaWriteWithImm ||
                             is_local_operation(op);
    case QpType::kUd: return op == WrOpcode::kSend || op == WrOpcode::kSendWithImm;
    case QpType::kXrcRecv: return false;  // a target has no send queue
  }
  return false;
}

}  // namespace

uint32_t rnr_timer_us(uint8_t code) {
  // IBTA 9.7.5.2.8, table 45: the RNR NAK timer field, in microseconds.
  static constexpr uint32_t kTable[32] = {
      655360, 10,    20,    30,    40,    60,    80,    120,   160,    240,    320,
      480,    640,   960,   1280,  1920,  2560,  3840,  5120,  7680,   10240,  15360,
      20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return kTable[code & 31];
}

void QpImpl::raise(AsyncEventType type) {
  hca->impl().raise(AsyncEvent{type, self, nullptr, 0});
}

Errno QpImpl::modify(const QpAttributes& a, uint32_t requested_mask) {
  const uint32_t mask = applicable_attributes(type, requested_mask);
  const QpState cur = attr.state;
  if ((mask & kQpAttrCurState) && a.cur_state != cur) return EINVAL;
  const QpState next = (mask & kQpAttrState) ? a.state : cur;
  if (Errno e = check_transition(type, cur, mask, next)) return e;
  if (Errno e = check_values(*this, a, mask)) return e;
  TargetEntryScope scope(*this);
  bool migrate_now = false;
  if (mask & kQpAttrPathMigState) {
    const bool alternate_loaded = (mask & kQpAttrAltPath) || attr.alt_port_num != 0;
    if (Errno e = check_migration_request(migration_state(), a.path_mig_state, next,
                                          alternate_loaded, migrate_now))
      return e;
  }

  if (mask & kQpAttrAv) peer_device_index = peer_device_of(a.av);
  if (mask & kQpAttrAltPath) alt_peer_device_index = peer_device_of(a.alt_av);
  if (next == QpState::kErr || next == QpState::kReset) responder.send_held_ack();
  copy_attrs(attr, a, mask);
  attr.state = next;
  if (migrate_now) migrate(MigrationCause::kSoftware);

  if (next == cur) return 0;
  switch (next) {
    case QpState::kReset: reset(); break;
    case QpState::kErr: enter_error(); break;
    case QpState::kRtr:
      responder.start(attr.rq_psn, attr.max_dest_rd_atomic);
      first_rq_psn.store(attr.rq_psn, std::memory_order_relaxed);
      if (type != QpType::kUd) engine->same_host().open_route_to(destination());
      break;
    case QpState::kRts:
      if (cur == QpState::kRtr) {
        requester.start(attr.sq_psn);
        completer.start(attr.sq_psn);
        first_sq_psn.store(attr.sq_psn, std::memory_order_relaxed);
      }
      requester.run();
      break;
    case QpState::kSqd:
      requester.begin_drain();
      sq_drained_notify = attr.en_sqd_async_notify;
      note_send_queue_drained();
      break;
    default: break;
  }
  return 0;
}

void QpImpl::note_send_queue_drained() {
  if (attr.state != QpState::kSqd || !sq_drained_notify || !requester.drained()) return;
  sq_drained_notify = false;
  raise(AsyncEventType::kSqDrained);
}

Errno QpImpl::resolve_datagram(const SendRequest& wr, DatagramDestination& out) const {
  // Any length is accepted: one above the MTU is dropped when sent
  // (Requester::send_datagram).
  if (!wr.ah) return EINVAL;
  out.av = wr.ah->av();
  out.device_index = wr.ah->device_index();
  out.multicast = wr.ah->multicast();
  out.qpn = wr.remote_qpn & packet::kPsnMask;
  // IBTA 10.2.5: a Q_Key with the high bit set in a WR means "use the QP's
  // own Q_Key" (controlled Q_Keys are not the sender's to choose).
  out.qkey = (wr.remote_qkey & 0x80000000u) ? attr.qkey : wr.remote_qkey;
  return 0;
}

Errno QpImpl::check_send(const SendRequest& wr, uint64_t& length) const {
  if (!sends_allowed(attr.state)) return EINVAL;
  if (!opcode_allowed(type, wr.opcode)) return EINVAL;
  if (is_local_operation(wr.opcode)) {
    length = 0;  // no SGEs: what it binds is in wr.bind
    return wr.opcode == WrOpcode::kBindMw && !wr.bind.mw ? EINVAL : 0;
  }
  // No SGEs either: the 8 bytes travel in the WR, a FLUSH moves none.
  if (wr.opcode == WrOpcode::kAtomicWrite) {
    length = 0;
    return 0;
  }
  if (wr.opcode == WrOpcode::kFlush) {
    length = 0;
    return flush_placement_valid(wr.flush_placement) && wr.flush_selectivity <= kFlushMr
               ? 0
               : EINVAL;
  }
  if (carries_inline(wr)) {
    if (wr.inline_data.size() > cap.max_inline_data) return EINVAL;
    length = wr.inline_data.size();
  } else {
    if (wr.sges.size() > cap.max_send_sge) return EINVAL;
    length = 0;
    for (const Sge& s : wr.sges) length += s.length;
  }
  if (length > kMaxMsgSize) return EINVAL;
  DatagramDestination ud;
  return type == QpType::kUd ? resolve_datagram(wr, ud) : 0;
}

void QpImpl::enqueue_send(const SendRequest& wr, uint64_t length) {
  SendWqe& w = sq.at(sq.tail);
  w = SendWqe{};
  if (type == QpType::kUd) resolve_datagram(wr, w.ud);  // checked already
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.flags = wr.flags;
  w.imm_data = wr.imm_data;
  w.remote_addr = wr.remote_addr;
  w.rkey = wr.rkey;
  w.compare_add = wr.compare_add;
  w.swap = wr.swap;
  w.xrc_remote_srqn = wr.xrc_remote_srqn;
  w.atomic_write_data = wr.atomic_write_data;
  w.flush_placement = wr.flush_placement;
  w.flush_selectivity = wr.flush_selectivity;
  w.flush_length = wr.flush_length;
  w.length = length;
  if (wr.opcode == WrOpcode::kBindMw)
    w.bind = {wr.bind.mw->index(), wr.bind.mr_lkey, wr.bind.access, wr.bind.addr,
              wr.bind.length, wr.bind.zero_based, wr.bind.by_verb};
  if (carries_inline(wr)) {
    w.inline_len = static_cast<uint32_t>(length);
    std::copy(wr.inline_data.begin(), wr.inline_data.end(), sq.inline_at(sq.tail));
  } else if (!w.is_local()) {
    w.num_sge = static_cast<uint32_t>(wr.sges.size());
    std::copy(wr.sges.begin(), wr.sges.end(), sq.sges_at(sq.tail));
  }
  ++sq.tail;
  if (attr.state == QpState::kErr || attr.state == QpState::kSqe) {
    // IBTA 10.3.1.x: WRs posted in ERR (or to a UC send queue in SQE)
    // complete at once, flushed.
    w.started = true;
    completer.complete(w, WcStatus::kWrFlushErr);
    completer.retire_completed();
  }
}

Errno QpImpl::post_send(const SendRequest& wr) {
  uint64_t length = 0;
  if (Errno err = check_send(wr, length)) return err;
  if (sq.full() || !sq.allocate()) return ENOMEM;
  enqueue_send(wr, length);
  requester.run();
  return 0;
}

Errno QpImpl::post_send_batch(std::span<const SendRequest> wrs, size_t& refused) {
  // Everything is checked before anything is queued: all or nothing.
  for (size_t i = 0; i < wrs.size(); ++i) {
    uint64_t length = 0;
    if (Errno err = check_send(wrs[i], length)) {
      refused = i;
      return err;
    }
  }
  const uint64_t room = sq.capacity() - (sq.tail - sq.head);
  if (wrs.size() > room) {
    refused = room;  // the first that finds the SQ full
    return ENOMEM;
  }
  if (!wrs.empty() && !sq.allocate()) {
    refused = 0;
    return ENOMEM;
  }
  for (const SendRequest& wr : wrs) {
    uint64_t length = 0;
    check_send(wr, length);  // cannot fail now: only recomputes the length
    enqueue_send(wr, length);
  }
  requester.run();
  return 0;
}

Errno QpImpl::post_recv(const RecvRequest& wr) {
  // A QP attached to an SRQ has no receive queue of its own (ibv_post_recv(3)),
  // nor has either half of XRC.
  if (attr.state == QpState::kReset || srq || is_xrc(type)) return EINVAL;
  if (wr.sges.size() > cap.max_recv_sge) return EINVAL;
  if (rq.full() || !rq.allocate()) return ENOMEM;
  rq.push(wr);
  if (attr.state != QpState::kErr) {
    note_receive_posted(rq.tail - 1);
  } else if (!receive_flush_deferred) {
    responder.fail_receive(WcStatus::kWrFlushErr);
  }
  return 0;
}

void QpImpl::enter_error() {
  TargetEntryScope scope(*this);
  responder.send_held_ack();
  attr.state = QpState::kErr;
  completer.stop_timers();
  // IBTA 10.3.1.x (Error state): every outstanding WR completes, in order,
  // with "flushed in error".
  for (uint64_t n = sq.head; n != sq.tail; ++n) completer.complete(sq.at(n), WcStatus::kWrFlushErr);
  completer.retire_completed();
  sq.next = sq.tail;
  flush_receives_or_defer();
  // IBTA 11.6.3.3: a QP on an SRQ that enters ERR will take no more WQEs
  // from it; the application may now destroy it without losing any.
  // An XRC target is attached to no SRQ: it only borrows one per message.
  if (srq && !is_xrc(type)) raise(AsyncEventType::kQpLastWqeReached);
}

void QpImpl::enter_send_queue_error() {
  attr.state = QpState::kSqe;
  for (uint64_t n = sq.head; n != sq.tail; ++n) completer.complete(sq.at(n), WcStatus::kWrFlushErr);
  completer.retire_completed();
  sq.next = sq.tail;
}

void QpImpl::reset() {
  if (send_cq) send_cq->discard_completions_of(qpn);
  if (recv_cq && recv_cq != send_cq) recv_cq->discard_completions_of(qpn);
  sq.head = sq.next = sq.tail = 0;
  rq.head = rq.tail = 0;
  requester.reset();
  completer.reset();
  responder.reset();
  start_placed_sends();
  sq_drained_notify = false;
  const QpCapabilities keep_cap = attr.cap;
  const Mtu keep_mtu = attr.path_mtu;  // a UD QP's is the port's, set at creation
  attr = QpAttributes{};
  attr.cap = keep_cap;
  if (type == QpType::kUd) attr.path_mtu = keep_mtu;
}

// ---- packets in and out

void QpImpl::receive(const packet::DecodedPacket& pkt) {
  const packet::OpcodeInfo& info =
      packet::opcode_info(static_cast<uint8_t>(pkt.headers.bth.opcode));
  // Not for this QP type: dropped, as a QP in a state that takes nothing
  // drops. An XRC initiator takes only responses, a target only requests.
  const bool fits = info.transport == packet::transport_of(type) &&
                    !(type == QpType::kXrcRecv && !info.is_request) &&
                    !(type == QpType::kXrcSend && info.is_request);
  if (!fits) {
    ++counters.packets_dropped_unfit;
    return;
  }
  if (type != QpType::kUd && (can_receive() || can_send()))
    note_peer_migration_state(pkt.headers);
  if (!info.is_request) {
    if (can_send() || attr.state == QpState::kSqe) {
      trace::packet_received(*this, pkt.headers);
      completer.on_response(pkt, info);
    } else {
      ++counters.packets_dropped_unfit;
    }
    return;
  }
  if (!can_receive() || pkt.headers.bth.pkey != kDefaultPkey) {  // P_Key mismatch too
    ++counters.packets_dropped_unfit;
    return;
  }
  ++counters.packets_received;
  trace::packet_received(*this, pkt.headers);
  if (type == QpType::kUd) {
    responder.receive_datagram(pkt);
    return;
  }
  TargetEntryScope scope(*this);
  if (placed_sends_missing_before(pkt.headers.bth.psn)) return lose_placed_sends();
  responder.receive(pkt, info);
}

void QpImpl::receive_run(const RunFrame& run) {
  const packet::OpcodeInfo& info = packet::opcode_info(static_cast<uint8_t>(run.first.bth.opcode));
  // An initiator receives no requests; a P_Key mismatch is dropped.
  if (info.transport != packet::transport_of(type) || !can_receive() ||
      type == QpType::kXrcSend || run.first.bth.pkey != kDefaultPkey) {
    counters.packets_dropped_unfit += run.packets;
    return;
  }
  note_peer_migration_state(run.first);
  counters.packets_received += run.packets;
  ++counters.runs_received;
  trace::run_received(*this, run);
  TargetEntryScope scope(*this);
  if (placed_sends_missing_before(run.first.bth.psn)) return lose_placed_sends();
  responder.receive_run(run);
}

// ---------------------------------------------------------------- Qp

Qp::Qp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { impl_->self = this; }

Qp::~Qp() {
  Hca::Impl& hca = impl_->hca->impl();
  // After this no packet or timer reaches the QP; a destroyed QP leaves
  // its multicast groups.
  if (impl_->type == QpType::kUd) impl_->engine->detach_all_multicast(*impl_);
  impl_->engine->remove_qp(impl_->device_index, impl_->qpn);
  // Waits for an initiator executing on it to finish.
  impl_->engine->same_host().target_table().remove_qp(impl_->target_entry);
  {
    std::lock_guard lock(hca.objects_mutex);
    hca.qps.erase(impl_.get());
    std::lock_guard qp_lock(impl_->mutex);
    hca.destroyed_qp_counters += impl_->current_counters();
    impl_->responder.release_receive();
  }
  // Type 2 windows bound to it reach nothing any more.
  impl_->release_windows();
  if (impl_->type == QpType::kXrcRecv) {
    impl_->xrcd->users.fetch_sub(1);  // its PD, SRQ and CQ were borrowed
    return;
  }
  impl_->pd->users.fetch_sub(1);
  if (impl_->srq) impl_->srq->users.fetch_sub(1);
  impl_->send_cq->users.fetch_sub(1);
  if (impl_->recv_cq) impl_->recv_cq->users.fetch_sub(1);
}

uint32_t Qp::qpn() const { return impl_->qpn; }
QpType Qp::type() const { return impl_->type; }

QpState Qp::state() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->attr.state;
}

Errno Qp::modify(const QpAttributes& attr, uint32_t mask) {
  std::lock_guard lock(impl_->mutex);
  return impl_->modify(attr, mask);
}

Errno Qp::query(QpAttributes& out) const {
  std::lock_guard lock(impl_->mutex);
  out = impl_->attr;
  out.cur_state = impl_->attr.state;
  // As the kernel reports it: 1 from SQD's entry until the drain is done.
  out.sq_draining = impl_->attr.state == QpState::kSqd && !impl_->requester.drained();
  return 0;
}

QpCounters Qp::counters() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->current_counters();
}

Errno Qp::post_send(const SendRequest& wr) {
  std::lock_guard lock(impl_->mutex);
  return impl_->post_send(wr);
}

namespace {

// IBTA 4.1.1: multicast LIDs are 0xC000-0xFFFE; a RoCE port has no LIDs.
bool valid_group(const QpImpl& qp, const Gid& gid, uint16_t lid) {
  if (qp.type != QpType::kUd || !is_multicast_gid(gid)) return false;
  if (qp.hca->description().link_layer == LinkLayer::kEthernet) return true;
  return is_multicast_lid(lid);
}

}  // namespace

// The engine's intake lock comes before the QP's: neither is held here.
Errno Qp::attach_multicast(const Gid& gid, uint16_t lid) {
  if (!valid_group(*impl_, gid, lid)) return EINVAL;
  return impl_->engine->attach_multicast(*impl_, gid, lid);
}

Errno Qp::detach_multicast(const Gid& gid, uint16_t lid) {
  if (!valid_group(*impl_, gid, lid)) return EINVAL;
  return impl_->engine->detach_multicast(*impl_, gid, lid);
}

Errno Qp::post_send_batch(std::span<const SendRequest> wrs, size_t& refused) {
  std::lock_guard lock(impl_->mutex);
  return impl_->post_send_batch(wrs, refused);
}

Errno Qp::post_recv(const RecvRequest& wr) {
  std::lock_guard lock(impl_->mutex);
  return impl_->post_recv(wr);
}

}  // namespace softverbs
