// Modify QP, posting, and the transitions' side effects.
#include <algorithm>
#include <cerrno>

#include "emulator/qp_impl.h"
#include "emulator/qp_state.h"

namespace softverbs {
namespace {

// Attribute values a Modify QP may carry, checked before anything changes.
Errno check_values(const QpImpl& qp, const QpAttributes& a, uint32_t mask) {
  const DeviceAttributes& dev = qp.hca->attributes();
  PortAttributes port;
  qp.hca->query_port(1, port);
  if ((mask & kQpAttrPort) && a.port_num != 1) return EINVAL;
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
                             kAccessRemoteAtomic;
    if (a.access_flags & ~all) return EINVAL;
  }
  if (mask & kQpAttrAv) {
    if (a.av.port_num != 0 && a.av.port_num != 1) return EINVAL;
    if (a.av.is_global && a.av.sgid_index >= port.gid_tbl_len) return EINVAL;
  }
  return 0;
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

bool opcode_allowed(QpType type, WrOpcode op) {
  switch (type) {
    case QpType::kRc: return op != WrOpcode::kSendWithInv;  // needs memory windows
    case QpType::kUc: return op == WrOpcode::kSend || op == WrOpcode::kSendWithImm ||
                             op == WrOpcode::kRdmaWrite || op == WrOpcode::kRdmaWriteWithImm;
    case QpType::kUd: return op == WrOpcode::kSend || op == WrOpcode::kSendWithImm;
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

Errno QpImpl::modify(const QpAttributes& a, uint32_t mask) {
  const QpState cur = attr.state;
  if ((mask & kQpAttrCurState) && a.cur_state != cur) return EINVAL;
  const QpState next = (mask & kQpAttrState) ? a.state : cur;
  if (Errno e = check_transition(type, cur, mask, next)) return e;
  if (Errno e = check_values(*this, a, mask)) return e;

  // Resolve where the peer lives before committing, so a bad AV changes nothing.
  if (mask & kQpAttrAv) {
    const DeviceDescription* peer = a.av.is_global ? find_device_by_gid(a.av.dgid) : nullptr;
    if (!peer) peer = find_device_by_lid(a.av.dlid);
    // An address no soft device owns is legal (a remote host, later): its
    // packets are dropped and counted by the wire.
    peer_routable = peer != nullptr;
    peer_device_index = peer ? peer->index : 0;
  }
  copy_attrs(attr, a, mask);
  attr.state = next;

  if (next == cur) return 0;
  switch (next) {
    case QpState::kReset: reset(); break;
    case QpState::kErr: enter_error(); break;
    case QpState::kRtr:
      epsn = attr.rq_psn;
      atomic_results.assign(std::max<uint32_t>(attr.max_dest_rd_atomic, 1), AtomicResult{});
      break;
    case QpState::kRts:
      if (cur == QpState::kRtr) {
        npsn = una_psn = psn_high = attr.sq_psn;
        retries_left = attr.retry_cnt;
        rnr_retries_left = attr.rnr_retry;
      }
      requester_run();
      break;
    case QpState::kSqd:
      sq_drained_notify = attr.en_sqd_async_notify;
      if (sq_drained_notify && sq_head == sq_tail) {
        sq_drained_notify = false;
        raise(AsyncEventType::kSqDrained);
      }
      break;
    default: break;
  }
  return 0;
}

Errno QpImpl::post_send(const SendRequest& wr) {
  if (!sends_allowed(attr.state)) return EINVAL;
  if (!opcode_allowed(type, wr.opcode)) return EINVAL;
  const bool is_inline = (wr.flags & kWrInline) && wr.opcode != WrOpcode::kRdmaRead;
  if (is_inline) {
    if (wr.inline_data.size() > cap.max_inline_data) return EINVAL;
  } else if (wr.sges.size() > cap.max_send_sge) {
    return EINVAL;
  }
  if (sq_tail - sq_head >= sq.size()) return ENOMEM;
  uint64_t length = 0;
  if (is_inline) {
    length = wr.inline_data.size();
  } else {
    for (const Sge& s : wr.sges) length += s.length;
  }
  if (length > kMaxMsgSize) return EINVAL;

  SendWqe& w = sq_at(sq_tail);
  w = SendWqe{};
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.flags = wr.flags;
  w.imm_data = wr.imm_data;
  w.remote_addr = wr.remote_addr;
  w.rkey = wr.rkey;
  w.compare_add = wr.compare_add;
  w.swap = wr.swap;
  w.length = length;
  if (is_inline) {
    w.inline_len = static_cast<uint32_t>(length);
    std::copy(wr.inline_data.begin(), wr.inline_data.end(), sq_inline_at(sq_tail));
  } else {
    w.num_sge = static_cast<uint32_t>(wr.sges.size());
    std::copy(wr.sges.begin(), wr.sges.end(), sq_sges_at(sq_tail));
  }
  ++sq_tail;
  if (attr.state == QpState::kErr || attr.state == QpState::kSqe) {
    // IBTA 10.3.1.x: WRs posted in ERR (or to a UC send queue in SQE)
    // complete at once, flushed.
    w.started = true;
    complete_send(w, WcStatus::kWrFlushErr);
    retire_completed();
    return 0;
  }
  requester_run();
  return 0;
}

Errno QpImpl::post_recv(const RecvRequest& wr) {
  if (attr.state == QpState::kReset) return EINVAL;
  if (wr.sges.size() > cap.max_recv_sge) return EINVAL;
  if (rq_tail - rq_head >= rq.size()) return ENOMEM;
  RecvWqe& r = rq_at(rq_tail);
  r.wr_id = wr.wr_id;
  r.num_sge = static_cast<uint32_t>(wr.sges.size());
  r.length = 0;
  for (const Sge& s : wr.sges) r.length += s.length;
  std::copy(wr.sges.begin(), wr.sges.end(), rq_sges_at(rq_tail));
  ++rq_tail;
  if (attr.state == QpState::kErr) fail_receive(WcStatus::kWrFlushErr);
  return 0;
}

void QpImpl::enter_error() {
  attr.state = QpState::kErr;
  retransmit_deadline_ns = rnr_deadline_ns = 0;
  engine->unwatch_timer(this);
  // IBTA 10.3.1.x (Error state): every outstanding WR completes, in order,
  // with "flushed in error".
  for (uint64_t n = sq_head; n != sq_tail; ++n) {
    SendWqe& w = sq_at(n);
    if (!w.done) complete_send(w, WcStatus::kWrFlushErr);
  }
  retire_completed();
  sq_next = sq_tail;
  while (rq_head != rq_tail) fail_receive(WcStatus::kWrFlushErr);
  recv_in_progress = write_in_progress = false;
}

void QpImpl::enter_send_queue_error() {
  attr.state = QpState::kSqe;
  for (uint64_t n = sq_head; n != sq_tail; ++n) {
    SendWqe& w = sq_at(n);
    if (!w.done) complete_send(w, WcStatus::kWrFlushErr);
  }
  retire_completed();
  sq_next = sq_tail;
}

void QpImpl::reset() {
  retransmit_deadline_ns = rnr_deadline_ns = 0;
  engine->unwatch_timer(this);
  sq_head = sq_next = sq_tail = 0;
  rq_head = rq_tail = 0;
  send_offset = 0;
  reads_outstanding = 0;
  npsn = una_psn = psn_high = epsn = msn = 0;
  uc_dropping = false;
  resend_pending = false;
  for (auto& r : atomic_results) r = AtomicResult{};
  nak_sent = recv_in_progress = write_in_progress = comm_established = false;
  peer_routable = false;
  const QpCapabilities keep_cap = attr.cap;
  attr = QpAttributes{};
  attr.cap = keep_cap;
}

}  // namespace softverbs
