// The completer's steps and timers. See completer.h for the machine.
#include "emulator/transport/completer.h"

#include <algorithm>

#include "emulator/objects/qp_impl.h"
#include "emulator/trace/protocol_events.h"
#include "emulator/transport/aeth.h"

namespace softverbs {
namespace {

// READ requests sent at once to fill the gaps of one READ; the last covers
// the rest of it.
constexpr uint32_t kMaxGapRequests = 16;

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
    case WrOpcode::kBindMw: return WcOpcode::kBindMw;
    case WrOpcode::kLocalInv: return WcOpcode::kLocalInv;
    case WrOpcode::kAtomicWrite: return WcOpcode::kAtomicWrite;
    case WrOpcode::kFlush: return WcOpcode::kFlush;
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

bool ends_message(packet::Position p) {
  return p == packet::Position::kLast || p == packet::Position::kOnly;
}

}  // namespace

void Completer::start(uint32_t sq_psn) {
  una_psn_ = sq_psn;
  retries_left_ = qp_.attr.retry_cnt;
  rnr_retries_left_ = qp_.attr.rnr_retry;
}

void Completer::reset() {
  stop_timers();
  una_psn_ = 0;
  retries_left_ = rnr_retries_left_ = 0;
  resend_pending_ = false;
  resend_psn_ = 0;
  read_arrivals_.forget();
  deferred_ack_psn_.reset();
}

// ---- the machine

void Completer::on_response(const packet::DecodedPacket& pkt, const packet::OpcodeInfo& info) {
  Response r{pkt, info, pkt.headers.bth.psn};
  Step step = Step::kCheckPsn;
  while (step != Step::kDone) {
    switch (step) {
      case Step::kCheckPsn: step = check_psn(r); break;
      case Step::kAcknowledge: step = acknowledge(r); break;
      case Step::kReadResponse: step = read_response(r); break;
      case Step::kAtomicAcknowledge: step = atomic_acknowledge(r); break;
      case Step::kAck: step = ack(r); break;
      case Step::kRnrNak: step = rnr_nak(r); break;
      case Step::kNak: step = nak(r); break;
      case Step::kDone: break;
    }
  }
}

Completer::Step Completer::check_psn(Response& r) {
  const uint32_t next = qp_.requester.next_psn();
  // After a go back N the window may let only part of what was sent go
  // again before an ACK comes for more of it: the responder holds every
  // PSN up to the ACK's, so it acknowledges all that is outstanding now.
  if (r.info.operation == packet::Operation::kAcknowledge &&
      aeth::kind(r.pkt.headers.aeth.syndrome) == aeth::Kind::kAck && next != una_psn_ &&
      packet::psn_diff(r.psn, next) >= 0 &&
      packet::psn_diff(r.psn, qp_.requester.sent_end()) < 0)
    r.psn = packet::psn_add(next, packet::kPsnMask);  // next - 1
  // Responses for PSNs never sent, or older than anything outstanding, are
  // stale duplicates (IBTA 9.7.5.1.x): ignore them.
  if (packet::psn_diff(r.psn, next) >= 0 ||
      packet::psn_diff(r.psn, una_psn_) < 0) {
    ++qp_.counters.stale_responses;
    return Step::kDone;
  }
  ++qp_.counters.packets_received;
  return Step::kAcknowledge;
}

Completer::Step Completer::acknowledge(Response& r) {
  switch (r.info.operation) {
    case packet::Operation::kReadResponse:
      // Whatever becomes of this response, everything before it is done.
      return take_acknowledgement(r.psn) ? Step::kReadResponse : Step::kDone;
    case packet::Operation::kAtomicAcknowledge:
      return take_acknowledgement(r.psn) ? Step::kAtomicAcknowledge : Step::kDone;
    case packet::Operation::kAcknowledge:
      switch (aeth::kind(r.pkt.headers.aeth.syndrome)) {
        case aeth::Kind::kAck: return Step::kAck;
        case aeth::Kind::kRnrNak: return Step::kRnrNak;
        case aeth::Kind::kNak: return Step::kNak;
        case aeth::Kind::kReserved: return Step::kDone;
      }
      return Step::kDone;
    default:
      return Step::kDone;
  }
}

Completer::Step Completer::read_response(Response& r) {
  // The oldest incomplete WQE must be the READ these responses belong to;
  // its responses are kept in any order, each once.
  SendQueue& sq = qp_.sq;
  const uint64_t index = sq.oldest_incomplete();
  if (index == sq.tail) return Step::kDone;
  SendWqe& w = sq.at(index);
  if (!w.is_read() || !psn_in(r.psn, w.first_psn, w.last_psn)) return Step::kDone;
  read_arrivals_.follow(w.first_psn);
  const int32_t ahead = packet::psn_diff(r.psn, w.next_response_psn);
  if (ahead < 0 || uint32_t(ahead) >= ReadArrivals::kSpan || read_arrivals_.arrived(r.psn)) {
    ++qp_.counters.stale_responses;  // a duplicate, or too far ahead: asked for again later
    return Step::kDone;
  }
  // Every response but the READ's last carries a full MTU; the last ends a
  // request (the READ's own or one that asked again for a gap).
  const uint64_t offset = uint64_t(packet::psn_diff(r.psn, w.first_psn)) * qp_.mtu();
  const bool ends_read = r.psn == w.last_psn;
  if (r.pkt.payload.size() != std::min<uint64_t>(qp_.mtu(), w.length - offset) ||
      (ends_read && !ends_message(r.info.position))) {
    fail_wqe(w, WcStatus::kBadRespErr);
    return Step::kDone;
  }
  if (!r.pkt.payload.empty()) {
    WcStatus st = qp_.scatter(sq.sges_at(index), w.num_sge, offset, r.pkt.payload);
    if (st != WcStatus::kSuccess) {
      fail_wqe(w, st);
      return Step::kDone;
    }
  }
  read_arrivals_.mark(r.psn);
  const uint32_t missing = read_arrivals_.first_missing(w.next_response_psn);
  if (missing != w.next_response_psn) {
    w.next_response_psn = missing;
    advance_una(missing);
  }
  if (missing == packet::psn_add(w.last_psn, 1)) {
    complete(w, WcStatus::kSuccess);
    read_arrivals_.forget();
    apply_deferred_acknowledgement();
  } else if (r.psn == w.read_stream_end) {
    // What the latest request asked for has come, with gaps before it.
    request_missing_responses(w, /*stream_ended=*/true);
  }
  retire_completed();
  qp_.requester.run();
  return Step::kDone;
}

Completer::Step Completer::atomic_acknowledge(Response& r) {
  SendQueue& sq = qp_.sq;
  const uint64_t index = sq.oldest_incomplete();
  if (index == sq.tail) return Step::kDone;
  SendWqe& w = sq.at(index);
  if (!w.started || w.first_psn != r.psn || !w.is_atomic()) {
    ++qp_.counters.stale_responses;
    return Step::kDone;
  }
  const WcStatus st = scatter_original(index, r.pkt.headers.atomic_ack_eth.orig_data);
  complete(w, st);
  advance_una(packet::psn_add(r.psn, 1));
  retire_completed();
  if (st != WcStatus::kSuccess) {
    qp_.enter_error();
    return Step::kDone;
  }
  qp_.requester.run();
  return Step::kDone;
}

Completer::Step Completer::ack(Response& r) {
  if (take_acknowledgement(packet::psn_add(r.psn, 1))) qp_.requester.run();
  return Step::kDone;
}

Completer::Step Completer::rnr_nak(Response& r) {
  ++qp_.counters.rnr_naks_received;
  if (!take_acknowledgement(r.psn)) return Step::kDone;
  if (qp_.attr.rnr_retry != 7) {  // 7 means retry forever (IBTA 9.7.5.2.8)
    if (rnr_retries_left_ == 0) {
      fail_oldest(WcStatus::kRnrRetryExcErr);
      return Step::kDone;
    }
    --rnr_retries_left_;
  }
  trace::rnr_wait(qp_, r.psn, rnr_retries_left_);
  qp_.requester.rewind_to(r.psn);
  retransmit_deadline_ns_ = 0;
  const uint64_t wait_ns =
      uint64_t(rnr_timer_us(aeth::value(r.pkt.headers.aeth.syndrome))) * 1000;
  rnr_deadline_ns_ = qp_.engine->clock().now_ns() + wait_ns;
  schedule(rnr_deadline_ns_);
  return Step::kDone;
}

Completer::Step Completer::nak(Response& r) {
  const Acknowledgement acked = acknowledge_before(r.psn);
  advance_una(acked.acked);
  retire_completed();
  const uint8_t code = aeth::value(r.pkt.headers.aeth.syndrome);
  if (code == aeth::kNakPsnSequenceError) {
    ++qp_.counters.sequence_naks_received;
    resend_from(acked.acked);
  } else {
    fail_at(r.psn, nak_status(code));
  }
  return Step::kDone;
}

// ---- acknowledgement

// A READ or atomic is done only by its own responses, so acknowledgement
// stops at its first missing response; if the responder has moved past it,
// those responses were lost (an "implied NAK", IBTA 9.7.5.1.x).
Completer::Acknowledgement Completer::acknowledge_before(uint32_t psn) {
  SendQueue& sq = qp_.sq;
  for (uint64_t n = sq.head; n != sq.tail; ++n) {
    SendWqe& w = sq.at(n);
    if (w.done) continue;
    if (!w.started) break;
    if (w.is_rd_atomic()) {
      if (packet::psn_diff(w.last_psn, psn) < 0) return {w.next_response_psn, true};
      if (packet::psn_diff(w.next_response_psn, psn) < 0) return {w.next_response_psn, false};
      break;
    }
    if (packet::psn_diff(w.last_psn, psn) >= 0) break;
    complete(w, WcStatus::kSuccess);
  }
  return {psn, false};
}

void Completer::advance_una(uint32_t psn) {
  if (packet::psn_diff(psn, una_psn_) <= 0) return;
  qp_.requester.window().on_acknowledged(static_cast<uint32_t>(packet::psn_diff(psn, una_psn_)));
  una_psn_ = psn;
  trace::acknowledged(qp_, una_psn_);
  if (deferred_ack_psn_ && packet::psn_diff(una_psn_, *deferred_ack_psn_) >= 0)
    deferred_ack_psn_.reset();
  resend_pending_ = false;
  // Forward progress restarts both retry budgets (IBTA 9.7.6.1.3; rxe and
  // HCAs alike): rnr_retry bounds the RNR NAKs of one stall, not of the QP.
  retries_left_ = qp_.attr.retry_cnt;
  rnr_retries_left_ = qp_.attr.rnr_retry;
  fair_timeout_.reset();
  retransmit_deadline_ns_ = 0;
  if (una_psn_ != qp_.requester.next_psn()) arm_retransmit_timer();
}

// Applies what a response says about the requests before `psn`. Returns
// true when the response may be used further; false when it showed a READ
// or atomic response lost and the requester went back for it.
bool Completer::take_acknowledgement(uint32_t psn) {
  const Acknowledgement acked = acknowledge_before(psn);
  advance_una(acked.acked);
  retire_completed();
  if (!acked.implied_nak) return true;
  ++qp_.counters.implied_naks;
  // What this response says of the WQEs after the READ or atomic it passed
  // over still holds once that one is done.
  if (!deferred_ack_psn_ || packet::psn_diff(psn, *deferred_ack_psn_) > 0) deferred_ack_psn_ = psn;
  SendQueue& sq = qp_.sq;
  const uint64_t index = sq.oldest_incomplete();
  if (index != sq.tail && sq.at(index).is_read() && sq.at(index).next_response_psn == acked.acked)
    request_missing_responses(sq.at(index), /*stream_ended=*/false);
  else
    resend_from(acked.acked);
  return false;
}

void Completer::request_missing_responses(SendWqe& w, bool stream_ended) {
  // Later responses imply the same gaps again and again: once per missing
  // PSN, unless what was asked for has all come back (then the rest of the
  // gaps was lost again). Counted against retry_cnt like any resend.
  if (!stream_ended && resend_pending_ && resend_psn_ == w.next_response_psn) return;
  resend_pending_ = true;
  resend_psn_ = w.next_response_psn;
  if (retries_exhausted()) return fail_oldest(WcStatus::kRetryExcErr);
  qp_.requester.window().on_loss(w.next_response_psn, qp_.requester.next_psn());
  read_arrivals_.follow(w.first_psn);
  read_arrivals_.for_each_gap(w.next_response_psn, w.last_psn, kMaxGapRequests,
                              [&](uint32_t psn, uint32_t packets) {
                                qp_.requester.request_read_part(w, psn, packets);
                              });
}

void Completer::apply_deferred_acknowledgement() {
  if (!deferred_ack_psn_) return;
  const uint32_t psn = *deferred_ack_psn_;
  deferred_ack_psn_.reset();
  // After a go back N, PSNs past the one to send next are sent again anyway.
  if (packet::psn_diff(psn, qp_.requester.next_psn()) > 0) return;
  if (!take_acknowledgement(psn)) return;
  // It may have been a response of the next READ, dropped while this one
  // was missing responses: that READ's responses up to it came and went.
  SendQueue& sq = qp_.sq;
  const uint64_t index = sq.oldest_incomplete();
  if (index == sq.tail) return;
  SendWqe& next = sq.at(index);
  if (next.is_read() && next.started && packet::psn_diff(psn, next.next_response_psn) > 0)
    request_missing_responses(next, /*stream_ended=*/true);
}

void Completer::resend_from(uint32_t psn) {
  // A NAK or an implied NAK: go back N, counting it against retry_cnt like
  // a timeout (IBTA 9.7.5.2.2). Responses to the packets sent before the
  // rewind keep arriving and imply the same loss again: one rewind per lost
  // PSN is enough, the timer covers a lost retransmission.
  if (resend_pending_ && psn == resend_psn_) return;
  resend_pending_ = true;
  resend_psn_ = psn;
  if (retries_exhausted()) return fail_oldest(WcStatus::kRetryExcErr);
  qp_.requester.window().on_loss(psn, qp_.requester.next_psn());
  qp_.requester.rewind_to(psn);
  qp_.requester.run();
}

bool Completer::retries_exhausted() {
  if (retries_left_ > 0) {
    --retries_left_;
    return false;
  }
  // IBTA 17.2.8: an armed QP migrates instead, and counts afresh there.
  if (!qp_.migrate_instead_of_failing(MigrationCause::kRetriesExhausted)) return true;
  retries_left_ = qp_.attr.retry_cnt;
  return false;
}

void Completer::resend_outstanding() {
  if (una_psn_ == qp_.requester.next_psn()) return;
  resend_pending_ = true;
  resend_psn_ = una_psn_;
  qp_.requester.window().on_loss(una_psn_, qp_.requester.next_psn());
  qp_.requester.rewind_to(una_psn_);
  qp_.requester.run();
}

// ---- completion

void Completer::executed_directly(SendWqe& w, uint64_t index, uint64_t original) {
  trace::executed_directly(qp_, w.first_psn, wc_opcode(w.opcode));
  // An atomic's answer lands in its buffer as an atomic ACK's would.
  const WcStatus st = w.is_atomic() ? scatter_original(index, original) : WcStatus::kSuccess;
  complete(w, st);
  advance_una(qp_.requester.next_psn());
  retire_completed();
  if (st != WcStatus::kSuccess) qp_.enter_error();
}

WcStatus Completer::scatter_original(uint64_t index, uint64_t original) {
  const SendWqe& w = qp_.sq.at(index);
  return qp_.scatter(
      qp_.sq.sges_at(index), w.num_sge, 0,
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&original), sizeof(original)));
}

void Completer::complete(SendWqe& w, WcStatus status) {
  if (w.done) return;
  if (w.is_rd_atomic() && w.started) qp_.requester.rd_atomic_finished();
  w.done = true;
  w.status = status;
}

void Completer::retire_completed() {
  SendQueue& sq = qp_.sq;
  while (sq.head != sq.tail && sq.at(sq.head).done) {
    const SendWqe& w = sq.at(sq.head);
    trace::send_completed(qp_, wc_opcode(w.opcode), w.status);
    // IBTA 10.7.3.1: unsignaled WRs complete silently unless in error.
    if (w.status != WcStatus::kSuccess || qp_.sq_sig_all || (w.flags & kWrSignaled)) {
      Completion c;
      c.wr_id = w.wr_id;
      c.status = w.status;
      c.opcode = wc_opcode(w.opcode);
      c.byte_len = static_cast<uint32_t>(w.length);
      c.qp_num = qp_.qpn;
      qp_.send_cq->impl().push(c, false);
    }
    ++sq.head;
  }
  if (sq.next < sq.head) sq.next = sq.head;
  qp_.note_send_queue_drained();
}

void Completer::fail_wqe(SendWqe& w, WcStatus status) {
  complete(w, status);
  retire_completed();
  qp_.enter_error();
}

void Completer::fail_at(uint32_t psn, WcStatus status) {
  // The NAKed request's WQE completes in error; everything else is flushed.
  SendQueue& sq = qp_.sq;
  for (uint64_t n = sq.head; n != sq.tail; ++n) {
    SendWqe& w = sq.at(n);
    if (w.done || !w.started) continue;
    if (psn_in(psn, w.first_psn, w.last_psn)) return fail_wqe(w, status);
  }
  fail_oldest(status);
}

void Completer::fail_oldest(WcStatus status) {
  SendQueue& sq = qp_.sq;
  const uint64_t index = sq.oldest_incomplete();
  if (index != sq.tail) complete(sq.at(index), status);
  qp_.enter_error();
}

// ---- timers

void Completer::schedule(uint64_t deadline_ns) {
  // One queued entry per QP is enough unless the new deadline is sooner.
  if (queued_deadline_ns_ && queued_deadline_ns_ <= deadline_ns) return;
  queued_deadline_ns_ = deadline_ns;
  qp_.engine->schedule_timer(qp_.timer_key(), deadline_ns);
}

void Completer::arm_retransmit_timer() {
  if (qp_.attr.timeout == 0 || retransmit_deadline_ns_) return;  // 0: wait forever
  retransmit_deadline_ns_ = qp_.engine->clock().now_ns() + local_ack_timeout_ns();
  schedule(retransmit_deadline_ns_);
}

uint64_t Completer::local_ack_timeout_ns() const { return 4096ull << qp_.attr.timeout; }

void Completer::local_ack_timeout(uint64_t now_ns) {
  // A peer of this host that has not run since is waited for: the timer is
  // re-armed by on_timer, no retry spent (fair_timeout.h).
  if (fair_timeout_.wait_again(qp_.engine->same_host(), qp_.own_address(), qp_.destination(),
                               now_ns, local_ack_timeout_ns())) {
    ++qp_.counters.retransmit_timeouts_waited;
    return;
  }
  ++qp_.counters.retransmit_timeouts;
  trace::ack_timeout(qp_, una_psn_, retries_left_);
  if (retries_exhausted())
    fail_oldest(WcStatus::kRetryExcErr);
  else
    resend_outstanding();
}

void Completer::on_timer(uint64_t now_ns) {
  if (queued_deadline_ns_ && queued_deadline_ns_ <= now_ns) queued_deadline_ns_ = 0;
  if (rnr_deadline_ns_ && now_ns >= rnr_deadline_ns_) {
    rnr_deadline_ns_ = 0;
    qp_.requester.run();
  }
  if (retransmit_deadline_ns_ && now_ns >= retransmit_deadline_ns_) {
    retransmit_deadline_ns_ = 0;
    if (una_psn_ != qp_.requester.next_psn()) local_ack_timeout(now_ns);
  }
  // Liveness: while packets are unacknowledged a timer must run.
  if (qp_.can_send() && una_psn_ != qp_.requester.next_psn()) arm_retransmit_timer();
  // A deadline that moved later than the entry that fired needs an entry.
  if (!queued_deadline_ns_) {
    uint64_t next = UINT64_MAX;
    if (retransmit_deadline_ns_) next = retransmit_deadline_ns_;
    if (rnr_deadline_ns_) next = std::min(next, rnr_deadline_ns_);
    if (next != UINT64_MAX) schedule(next);
  }
}

}  // namespace softverbs
