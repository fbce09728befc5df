// The completer: retires send WQEs as ACKs, NAKs and READ responses arrive
// (IBTA 9.7.5.1), and runs the retransmit and RNR timers.
#include <algorithm>

#include "emulator/aeth.h"
#include "emulator/qp_impl.h"

namespace softverbs {
namespace {

WcOpcode wc_opcode(WrOpcode op) {
  switch (op) {
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
    case WrOpcode::kSendWithInv: return WcOpcode::kSend;
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm: return WcOpcode::kRdmaWrite;
    case WrOpcode::kRdmaRead: return WcOpcode::kRdmaRead;
    case WrOpcode::kAtomicCmpSwp: return WcOpcode::kCompSwap;
    case WrOpcode::kAtomicFetchAdd: return WcOpcode::kFetchAdd;
  }
  return WcOpcode::kSend;
}

WcStatus nak_status(uint8_t code) {
  switch (code) {
    case aeth::kNakInvalidRequest: return WcStatus::kRemInvReqErr;
    case aeth::kNakRemoteAccessError: return WcStatus::kRemAccessErr;
    case aeth::kNakRemoteOperationalError: return WcStatus::kRemOpErr;
    case aeth::kNakInvalidRdRequest: return WcStatus::kRemInvRdReqErr;
    default: return WcStatus::kBadRespErr;
  }
}

bool psn_in(uint32_t psn, uint32_t first, uint32_t last) {
  return packet::psn_diff(psn, first) >= 0 && packet::psn_diff(psn, last) <= 0;
}

}  // namespace

void QpImpl::arm_retransmit_timer() {
  if (attr.timeout == 0 || retransmit_deadline_ns) return;  // 0: wait forever
  // IBTA 9.7.6.1.3: the local ACK timeout is 4.096 us * 2^timeout.
  retransmit_deadline_ns = engine->clock().now_ns() + (4096ull << attr.timeout);
  engine->watch_timer(this);
}

void QpImpl::complete_send(SendWqe& w, WcStatus status) {
  if (w.done) return;
  if (is_rd_atomic(w) && w.started && reads_outstanding) --reads_outstanding;
  w.done = true;
  w.status = status;
}

void QpImpl::retire_completed() {
  while (sq_head != sq_tail && sq_at(sq_head).done) {
    SendWqe& w = sq_at(sq_head);
    // IBTA 10.7.3.1: unsignaled WRs complete silently unless in error.
    if (w.status != WcStatus::kSuccess || sq_sig_all || (w.flags & kWrSignaled)) {
      Completion c;
      c.wr_id = w.wr_id;
      c.status = w.status;
      c.opcode = wc_opcode(w.opcode);
      c.byte_len = static_cast<uint32_t>(w.length);
      c.qp_num = qpn;
      send_cq->impl().push(c, false);
    }
    ++sq_head;
  }
  if (sq_next < sq_head) sq_next = sq_head;
  if (attr.state == QpState::kSqd && sq_drained_notify && sq_head == sq_tail) {
    sq_drained_notify = false;
    raise(AsyncEventType::kSqDrained);
  }
}

void QpImpl::fail_send_at(uint32_t psn, WcStatus status) {
  // The NAKed request's WQE completes in error; everything else is flushed.
  for (uint64_t n = sq_head; n != sq_tail; ++n) {
    SendWqe& w = sq_at(n);
    if (w.done || !w.started) continue;
    if (packet::psn_diff(psn, w.first_psn) >= 0 && packet::psn_diff(psn, w.last_psn) <= 0) {
      complete_send(w, status);
      retire_completed();
      return enter_error();
    }
  }
  fail_send(status);
}

void QpImpl::fail_send(WcStatus status) {
  for (uint64_t n = sq_head; n != sq_tail; ++n) {
    SendWqe& w = sq_at(n);
    if (!w.done) {
      complete_send(w, status);
      break;
    }
  }
  enter_error();
}

namespace {

// What a response says about the requests before `psn`.
struct Acknowledgement {
  uint32_t acked;  // everything before this PSN is done
  bool implied_nak;  // a READ/atomic was passed over: resend from `acked`
};

// Everything before `psn` is acknowledged (explicitly or implicitly): retires
// the SEND/WRITE WQEs that end before it. A READ or atomic is done only by
// its own responses, so acknowledgement stops at its first missing response;
// if the responder has moved past it, those responses were lost (an "implied
// NAK", IBTA 9.7.5.1.x).
Acknowledgement acknowledge_before(QpImpl& qp, uint32_t psn) {
  for (uint64_t n = qp.sq_head; n != qp.sq_tail; ++n) {
    SendWqe& w = qp.sq_at(n);
    if (w.done) continue;
    if (!w.started) break;
    if (qp.is_rd_atomic(w)) {
      if (packet::psn_diff(w.last_psn, psn) < 0) return {w.next_response_psn, true};
      if (packet::psn_diff(w.next_response_psn, psn) < 0) return {w.next_response_psn, false};
      break;
    }
    if (packet::psn_diff(w.last_psn, psn) >= 0) break;
    qp.complete_send(w, WcStatus::kSuccess);
  }
  return {psn, false};
}

void advance_una(QpImpl& qp, uint32_t psn) {
  if (packet::psn_diff(psn, qp.una_psn) <= 0) return;
  qp.una_psn = psn;
  qp.resend_pending = false;
  // Forward progress restarts the retry budget (IBTA 9.7.6.1.3).
  qp.retries_left = qp.attr.retry_cnt;
  qp.retransmit_deadline_ns = 0;
  if (qp.una_psn != qp.npsn) qp.arm_retransmit_timer();
}

// Applies what a response says about the requests before `psn`. Returns
// true when the response may be used further; false when it showed a READ
// or atomic response lost and the requester went back for it.
bool take_acknowledgement(QpImpl& qp, uint32_t psn) {
  const Acknowledgement ack = acknowledge_before(qp, psn);
  advance_una(qp, ack.acked);
  qp.retire_completed();
  if (!ack.implied_nak) return true;
  ++qp.counters.implied_naks;
  qp.resend_from(ack.acked);
  return false;
}

}  // namespace

void QpImpl::resend_from(uint32_t psn) {
  // A NAK or an implied NAK: go back N, counting it against retry_cnt
  // like a timeout (IBTA 9.7.5.2.2). Responses to the packets sent before
  // the rewind keep arriving and imply the same loss again: one rewind per
  // lost PSN is enough, the timer covers a lost retransmission.
  if (resend_pending && psn == resend_psn) return;
  resend_pending = true;
  resend_psn = psn;
  if (retries_left == 0) return fail_send(WcStatus::kRetryExcErr);
  --retries_left;
  rewind_to(psn);
  requester_run();
}

void QpImpl::on_response(const packet::DecodedPacket& pkt) {
  const packet::Headers& h = pkt.headers;
  const uint32_t psn = h.bth.psn;
  // Responses for PSNs never sent, or older than anything outstanding, are
  // stale duplicates (IBTA 9.7.5.1.x): ignore them.
  if (packet::psn_diff(psn, npsn) >= 0 || packet::psn_diff(psn, una_psn) < 0) {
    ++counters.stale_responses;
    return;
  }
  ++counters.packets_received;
  const packet::OpcodeInfo& info = packet::opcode_info(static_cast<uint8_t>(h.bth.opcode));

  if (info.operation == packet::Operation::kAtomicAcknowledge) {
    // Whatever becomes of this response, everything before it is done.
    if (!take_acknowledgement(*this, psn)) return;
    for (uint64_t n = sq_head; n != sq_tail; ++n) {
      SendWqe& w = sq_at(n);
      if (w.done) continue;
      if (!w.started || w.first_psn != psn ||
          (w.opcode != WrOpcode::kAtomicCmpSwp && w.opcode != WrOpcode::kAtomicFetchAdd)) {
        ++counters.stale_responses;
        return;
      }
      const uint64_t orig = h.atomic_ack_eth.orig_data;
      WcStatus st = scatter(sq_sges_at(n), w.num_sge, 0,
                            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&orig),
                                                     sizeof(orig)));
      complete_send(w, st);
      advance_una(*this, packet::psn_add(psn, 1));
      retire_completed();
      if (st != WcStatus::kSuccess) return enter_error();
      requester_run();
      return;
    }
    return;
  }

  if (info.operation == packet::Operation::kReadResponse) {
    // Whatever becomes of this response, everything before it is done.
    if (!take_acknowledgement(*this, psn)) return;
    // The oldest incomplete WQE must be the READ these responses belong to.
    SendWqe* w = nullptr;
    uint64_t index = 0;
    for (uint64_t n = sq_head; n != sq_tail; ++n)
      if (!sq_at(n).done) {
        w = &sq_at(n);
        index = n;
        break;
      }
    if (!w || w->opcode != WrOpcode::kRdmaRead || !psn_in(psn, w->first_psn, w->last_psn))
      return;
    if (psn != w->next_response_psn) return;  // lost or duplicate: the timer recovers
    const uint64_t offset = uint64_t(packet::psn_diff(psn, w->first_psn)) * mtu();
    const bool last = info.position == packet::Position::kLast ||
                      info.position == packet::Position::kOnly;
    const uint64_t expected = last ? w->length - offset : mtu();
    if (pkt.payload.size() != std::min<uint64_t>(expected, w->length - offset)) {
      complete_send(*w, WcStatus::kBadRespErr);
      retire_completed();
      enter_error();
      return;
    }
    if (!pkt.payload.empty()) {
      WcStatus st = scatter(sq_sges_at(index), w->num_sge, offset, pkt.payload);
      if (st != WcStatus::kSuccess) {
        complete_send(*w, st);
        retire_completed();
        enter_error();
        return;
      }
    }
    w->next_response_psn = packet::psn_add(psn, 1);
    advance_una(*this, packet::psn_add(psn, 1));
    if (last && psn == w->last_psn) complete_send(*w, WcStatus::kSuccess);
    retire_completed();
    requester_run();
    return;
  }

  if (info.operation != packet::Operation::kAcknowledge) return;
  switch (aeth::kind(h.aeth.syndrome)) {
    case aeth::Kind::kAck: {
      if (take_acknowledgement(*this, packet::psn_add(psn, 1))) requester_run();
      return;
    }
    case aeth::Kind::kRnrNak: {
      ++counters.rnr_naks_received;
      if (!take_acknowledgement(*this, psn)) return;
      if (attr.rnr_retry != 7) {  // 7 means retry forever (IBTA 9.7.5.2.8)
        if (rnr_retries_left == 0) return fail_send(WcStatus::kRnrRetryExcErr);
        --rnr_retries_left;
      }
      rewind_to(psn);
      retransmit_deadline_ns = 0;
      rnr_deadline_ns =
          engine->clock().now_ns() + uint64_t(rnr_timer_us(aeth::value(h.aeth.syndrome))) * 1000;
      engine->watch_timer(this);
      return;
    }
    case aeth::Kind::kNak: {
      const Acknowledgement ack = acknowledge_before(*this, psn);
      advance_una(*this, ack.acked);
      retire_completed();
      if (aeth::value(h.aeth.syndrome) == aeth::kNakPsnSequenceError) {
        ++counters.sequence_naks_received;
        return resend_from(ack.acked);
      }
      return fail_send_at(psn, nak_status(aeth::value(h.aeth.syndrome)));
    }
    case aeth::Kind::kReserved:
      return;
  }
}

void QpImpl::on_timer(uint64_t now_ns) {
  if (rnr_deadline_ns && now_ns >= rnr_deadline_ns) {
    rnr_deadline_ns = 0;
    requester_run();
  }
  if (retransmit_deadline_ns && now_ns >= retransmit_deadline_ns) {
    retransmit_deadline_ns = 0;
    if (una_psn != npsn) {
      ++counters.retransmit_timeouts;
      if (retries_left == 0) {
        fail_send(WcStatus::kRetryExcErr);
      } else {
        --retries_left;
        resend_pending = true;
        resend_psn = una_psn;
        rewind_to(una_psn);
        requester_run();
      }
    }
  }
  // Liveness: while packets are unacknowledged a timer must run.
  if (can_send() && una_psn != npsn) arm_retransmit_timer();
  if (!timer_armed()) engine->unwatch_timer(this);
}

}  // namespace softverbs
