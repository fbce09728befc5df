// The responder's steps. See responder.h for the machine.
#include "emulator/transport/responder.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "emulator/objects/qp_impl.h"
#include "emulator/objects/srq_impl.h"
#include "emulator/trace/protocol_events.h"
#include "emulator/transport/ack_batch.h"
#include "emulator/wire/wire_burst.h"

namespace softverbs {
namespace {

using packet::Operation;
using packet::Position;

bool starts_message(Position p) { return p == Position::kFirst || p == Position::kOnly; }
bool ends_message(Position p) { return p == Position::kLast || p == Position::kOnly; }

}  // namespace

void Responder::start(uint32_t rq_psn, uint32_t max_dest_rd_atomic) {
  epsn_ = rq_psn;
  atomic_results_.assign(std::max<uint32_t>(max_dest_rd_atomic, 1), AtomicResult{});
}

void Responder::reset() {
  epsn_ = msn_ = 0;
  recv_in_progress_ = write_in_progress_ = comm_established_ = holds_ack_ = false;
  set_nak_sent(false);
  held_acks_ = 0;
  release_receive();
  uc_dropping_ = false;
  recv_offset_ = write_va_ = write_remaining_ = write_length_ = 0;
  for (auto& r : atomic_results_) r = AtomicResult{};
}

bool Responder::is_uc() const { return qp_.type == QpType::kUc; }

// ---- the machine

void Responder::receive(const packet::DecodedPacket& pkt, const packet::OpcodeInfo& info) {
  Request r{pkt.headers, info, pkt.headers, info, Payload{pkt.payload, nullptr}};
  run(r);
}

void Responder::receive_run(const RunFrame& frame) {
  Request r{frame.first, packet::opcode_info(static_cast<uint8_t>(frame.first.bth.opcode)),
            frame.last, packet::opcode_info(static_cast<uint8_t>(frame.last.bth.opcode)),
            Payload{{}, &frame}};
  run(r);
}

void Responder::receive_placed(const packet::DecodedPacket& pkt,
                               const packet::OpcodeInfo& info) {
  const bool taken = claim_receive() && pkt.payload.size() <= recv_wqe_.length;
  const WcStatus st = !taken ? WcStatus::kLocLenErr
                             : qp_.scatter(recv_wqe_.sges, recv_wqe_.num_sge, 0, pkt.payload);
  if (st != WcStatus::kSuccess) {
    // The initiator was told the SEND arrived: nothing here may fail
    // quietly, and nothing placed after it is taken.
    fail_receive(st);
    qp_.stop_placed_sends();
    return;
  }
  recv_offset_ = pkt.payload.size();
  complete_receive(pkt.headers, true, info.headers & packet::kHdrImmDt, false);
}

void Responder::run(Request& r) {
  Step step = Step::kCheckPsn;
  while (step != Step::kDone) {
    switch (step) {
      case Step::kCheckPsn: step = check_psn(r); break;
      case Step::kOutOfSequence: step = out_of_sequence(r); break;
      case Step::kDuplicate: step = duplicate(r); break;
      case Step::kExecute: step = execute(r); break;
      case Step::kExecuteSend: step = execute_send(r); break;
      case Step::kExecuteWrite: step = execute_write(r); break;
      case Step::kExecuteRead: step = execute_read(r); break;
      case Step::kExecuteAtomic: step = execute_atomic(r); break;
      case Step::kExecuteAtomicWrite: step = execute_atomic_write(r); break;
      case Step::kExecuteFlush: step = execute_flush(r); break;
      case Step::kComplete: step = complete(r); break;
      case Step::kAcknowledge: step = acknowledge(r); break;
      case Step::kUcGap: step = uc_gap(r); break;
      case Step::kPullFailed: step = pull_failed(r); break;
      case Step::kError: step = error(r); break;
      case Step::kDone: break;
    }
  }
}

Responder::Step Responder::check_psn(Request& r) {
  if (!comm_established_ && qp_.attr.state == QpState::kRtr) {
    // IBTA 11.6.3: first packet received in RTR.
    comm_established_ = true;
    qp_.raise(AsyncEventType::kCommEst);
  }
  comm_established_ = true;
  if (is_uc()) {
    const bool gap = r.h.bth.psn != epsn_;
    epsn_ = packet::psn_add(r.end.bth.psn, 1);
    return gap ? Step::kUcGap : Step::kExecute;
  }
  const int32_t delta = packet::psn_diff(r.h.bth.psn, epsn_);
  if (delta > 0) return Step::kOutOfSequence;
  if (delta < 0) return Step::kDuplicate;
  if (nak_sent_) set_nak_sent(false);
  return Step::kExecute;
}

void Responder::set_nak_sent(bool sent) {
  nak_sent_ = sent;
  answered_gap_.store(sent ? kGapAnswered | epsn_ : 0, std::memory_order_relaxed);
}

bool Responder::discards_unseen(uint32_t psn) const {
  const uint64_t gap = answered_gap_.load(std::memory_order_relaxed);
  return (gap & kGapAnswered) && packet::psn_diff(psn, static_cast<uint32_t>(gap)) > 0;
}

Responder::Step Responder::out_of_sequence(Request& r) {
  // One NAK per gap, then silence until the expected PSN comes.
  if (nak_sent_) {
    ++qp_.counters.out_of_sequence_dropped;
    return Step::kDone;
  }
  set_nak_sent(true);
  ++qp_.counters.sequence_naks_sent;
  // The NAK carries the PSN the responder expects (IBTA 9.7.5.2.2).
  send_ack(epsn_, aeth::nak(aeth::kNakPsnSequenceError));
  return Step::kDone;
}

Responder::Step Responder::duplicate(Request& r) {
  // IBTA 9.7.5.1.4: READs are executed again, atomics answered from the
  // saved result, the rest acknowledged again without being delivered.
  ++qp_.counters.duplicate_requests;
  const packet::Headers& h = r.h;
  switch (r.info.operation) {
    case Operation::kCompareSwap:
    case Operation::kFetchAdd:
      for (const AtomicResult& saved : atomic_results_) {
        if (saved.valid && saved.psn == h.bth.psn) {
          ++qp_.counters.atomic_replays;
          send_atomic_ack(h.bth.psn, saved.orig);
        }
      }
      return Step::kDone;
    case Operation::kFlush:
      // Done already: answered again, as a READ of nothing.
      if (qp_.type == QpType::kXrcRecv && !enter_xrc_srq(h.xrc_srqn)) return Step::kDone;
      if (flush_allowed(h)) send_read_response(h.bth.psn, 0, 0, 0);
      return Step::kDone;
    case Operation::kReadRequest:
      if (qp_.type == QpType::kXrcRecv && !enter_xrc_srq(h.xrc_srqn)) return Step::kDone;
      if (qp_.remote_access_ok(h.reth.rkey, h.reth.va, h.reth.dma_len, kAccessRemoteRead))
        send_read_response(h.bth.psn, h.reth.rkey, h.reth.va, h.reth.dma_len);
      return Step::kDone;
    default:
      if (r.end.bth.ack_req || ends_message(r.end_info.position))
        ack(packet::psn_add(epsn_, packet::kPsnMask));
      return Step::kDone;
  }
}

Responder::Step Responder::uc_gap(Request& r) {
  // UC (IBTA 9.8.3): a gap in PSNs loses the message in progress silently;
  // its receive WQE is used by the next message.
  drop_uc_message();
  uc_dropping_ = true;
  return Step::kExecute;
}

Responder::Step Responder::execute(Request& r) {
  if (is_uc()) {
    if (starts_message(r.info.position)) {
      if (recv_in_progress_ || write_in_progress_) {
        ++qp_.counters.uc_messages_dropped;  // its end was lost
        recv_in_progress_ = write_in_progress_ = false;
      }
      uc_dropping_ = false;
    }
    if (uc_dropping_) return Step::kDone;
  }
  // XRC: a request for an SRQ outside the target's domain is invalid.
  if (qp_.type == QpType::kXrcRecv && !enter_xrc_srq(r.h.xrc_srqn))
    return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  switch (r.info.operation) {
    case Operation::kSend: return Step::kExecuteSend;
    case Operation::kWrite: return Step::kExecuteWrite;
    case Operation::kReadRequest: return Step::kExecuteRead;
    case Operation::kCompareSwap:
    case Operation::kFetchAdd: return Step::kExecuteAtomic;
    case Operation::kAtomicWrite: return Step::kExecuteAtomicWrite;
    case Operation::kFlush: return Step::kExecuteFlush;
    default: return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  }
}

Responder::Step Responder::execute_send(Request& r) {
  if (starts_message(r.info.position)) {
    if (recv_in_progress_) return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
    const bool forced =
        !is_uc() && (forced_rnr() || qp_.engine->fault_plan_answers_rnr(qp_, r.h));
    if (forced) ++qp_.counters.forced_rnr_naks;
    if (forced || !claim_receive()) {
      if (is_uc()) {  // no WQE: the message is lost
        drop_uc_message();
        return Step::kDone;
      }
      rnr_nak(r.h.bth.psn);  // Receiver Not Ready (IBTA 9.7.5.2.8)
      return Step::kDone;
    }
    recv_in_progress_ = true;
    recv_offset_ = 0;
  } else if (!recv_in_progress_) {
    return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  }
  if (recv_offset_ + r.payload.size() > recv_wqe_.length) {
    // The message does not fit the receive buffer: the receive completes
    // with a length error and the requester gets Invalid Request (a UC QP,
    // which cannot tell the requester, fails).
    fail_receive(WcStatus::kLocLenErr);
    return fail(r, aeth::kNakInvalidRequest,
                is_uc() ? AsyncEventType::kQpFatal : AsyncEventType::kQpReqErr);
  }
  const WcStatus st = qp_.scatter_payload(recv_wqe_.sges, recv_wqe_.num_sge, recv_offset_,
                                          r.payload, r.pull_error);
  if (st != WcStatus::kSuccess) {
    fail_receive(st);
    return fail(r, aeth::kNakRemoteOperationalError, AsyncEventType::kQpFatal);
  }
  if (r.pull_error) return Step::kPullFailed;
  recv_offset_ += r.payload.size();
  return Step::kComplete;
}

Responder::Step Responder::execute_write(Request& r) {
  const packet::Headers& h = r.h;
  const bool has_imm = r.end_info.headers & packet::kHdrImmDt;
  if (has_imm && !claim_receive()) {
    if (is_uc()) {
      drop_uc_message();
      return Step::kDone;
    }
    // WRITE with immediate consumes a receive WQE; without one the packet
    // is refused whole (RNR) and retried later, nothing placed.
    rnr_nak(h.bth.psn);
    return Step::kDone;
  }
  if (starts_message(r.info.position)) {
    if (write_in_progress_) return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
    if (!qp_.remote_access_ok(h.reth.rkey, h.reth.va, h.reth.dma_len, kAccessRemoteWrite))
      return fail(r, aeth::kNakRemoteAccessError, AsyncEventType::kQpAccessErr);
    write_in_progress_ = true;
    write_va_ = h.reth.va;
    write_remaining_ = h.reth.dma_len;
    write_length_ = h.reth.dma_len;
    write_rkey_ = h.reth.rkey;
  } else if (!write_in_progress_) {
    return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  }
  const uint64_t size = r.payload.size();
  if (size > write_remaining_) return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  // Checked again for every packet: the MR may have been deregistered
  // since the first one.
  if (!qp_.place_remote(write_rkey_, write_va_, r.payload, r.pull_error))
    return fail(r, aeth::kNakRemoteAccessError, AsyncEventType::kQpAccessErr);
  if (r.pull_error) return Step::kPullFailed;
  write_va_ += size;
  write_remaining_ -= size;
  if (ends_message(r.end_info.position)) {
    write_in_progress_ = false;
    if (write_remaining_ != 0) return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  }
  return Step::kComplete;
}

Responder::Step Responder::execute_read(Request& r) {
  const packet::Headers& h = r.h;
  if (!qp_.remote_access_ok(h.reth.rkey, h.reth.va, h.reth.dma_len, kAccessRemoteRead))
    return fail(r, aeth::kNakRemoteAccessError, AsyncEventType::kQpAccessErr);
  ++msn_;
  const uint32_t m = qp_.mtu();
  const uint32_t count =
      h.reth.dma_len == 0 ? 1 : static_cast<uint32_t>((uint64_t(h.reth.dma_len) + m - 1) / m);
  epsn_ = packet::psn_add(h.bth.psn, count);
  send_read_response(h.bth.psn, h.reth.rkey, h.reth.va, h.reth.dma_len);
  return Step::kDone;
}

Responder::Step Responder::execute_atomic(Request& r) {
  const packet::Headers& h = r.h;
  const uint64_t va = h.atomic_eth.va;
  if (!qp_.remote_access_ok(h.atomic_eth.rkey, va, sizeof(uint64_t), kAccessRemoteAtomic))
    return fail(r, aeth::kNakRemoteAccessError, AsyncEventType::kQpAccessErr);
  // IBTA 9.4.5: atomics address an aligned 64-bit word.
  if (va % sizeof(uint64_t)) return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  uint64_t orig = 0;
  const bool compare_swap = r.info.operation == Operation::kCompareSwap;
  const bool done = qp_.atomic_remote(h.atomic_eth.rkey, va, compare_swap,
                                      compare_swap ? h.atomic_eth.compare : h.atomic_eth.swap_add,
                                      h.atomic_eth.swap_add, orig);
  if (!done) return fail(r, aeth::kNakRemoteAccessError, AsyncEventType::kQpAccessErr);
  if (atomic_results_.empty()) atomic_results_.resize(1);
  atomic_results_[next_atomic_slot_++ % atomic_results_.size()] = {h.bth.psn, orig, true};
  ++msn_;
  epsn_ = packet::psn_add(h.bth.psn, 1);
  send_atomic_ack(h.bth.psn, orig);
  return Step::kDone;
}

Responder::Step Responder::execute_atomic_write(Request& r) {
  // Annex A19: 8 bytes to an aligned word, placed whole or not at all, with
  // the rights of a WRITE; acknowledged as one (a repeat writes the same).
  const packet::Headers& h = r.h;
  if (h.reth.dma_len != sizeof(uint64_t) || r.payload.bytes.size() != sizeof(uint64_t))
    return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  if (!qp_.remote_access_ok(h.reth.rkey, h.reth.va, sizeof(uint64_t), kAccessRemoteWrite))
    return fail(r, aeth::kNakRemoteAccessError, AsyncEventType::kQpAccessErr);
  // Like the other atomics (IBTA 9.4.5), it addresses an aligned word.
  if (h.reth.va % sizeof(uint64_t))
    return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  uint64_t data = 0;
  std::memcpy(&data, r.payload.bytes.data(), sizeof data);
  if (!qp_.atomic_write_remote(h.reth.rkey, h.reth.va, data))
    return fail(r, aeth::kNakRemoteAccessError, AsyncEventType::kQpAccessErr);
  return Step::kComplete;
}

bool Responder::flush_allowed(const packet::Headers& h) const {
  uint32_t access = 0;
  if (h.feth.placement_type & kFlushGlobal) access |= kAccessFlushGlobal;
  if (h.feth.placement_type & kFlushPersistent) access |= kAccessFlushPersistent;
  return qp_.flush_allowed(h.reth.rkey, h.reth.va, h.reth.dma_len,
                           h.feth.selectivity_level == kFlushMr, access);
}

Responder::Step Responder::execute_flush(Request& r) {
  const packet::Headers& h = r.h;
  if (!flush_placement_valid(h.feth.placement_type) || h.feth.selectivity_level > kFlushMr)
    return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  if (!flush_allowed(h)) return fail(r, aeth::kNakRemoteAccessError, AsyncEventType::kQpAccessErr);
  // Every earlier request was placed, in order, with stores the CPU makes
  // visible; the fence orders them before the answer.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ++msn_;
  epsn_ = packet::psn_add(h.bth.psn, 1);
  send_read_response(h.bth.psn, 0, 0, 0);
  return Step::kDone;
}

Responder::Step Responder::complete(Request& r) {
  if (!is_uc()) epsn_ = packet::psn_add(r.end.bth.psn, 1);
  if (!ends_message(r.end_info.position)) return is_uc() ? Step::kDone : Step::kAcknowledge;
  ++msn_;
  const bool is_send = r.info.operation == Operation::kSend;
  const bool has_imm = r.end_info.headers & packet::kHdrImmDt;
  const bool has_inv = r.end_info.headers & packet::kHdrIeth;
  recv_in_progress_ = write_in_progress_ = false;
  // SEND with invalidate: the named window bound to this QP is freed
  // before the receive completes; naming any other is an invalid request.
  if (has_inv && !qp_.invalidate_window(r.end.ieth_rkey, /*remote=*/true))
    return fail(r, aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  if (is_send || has_imm) complete_receive(r.end, is_send, has_imm, has_inv);
  return is_uc() ? Step::kDone : Step::kAcknowledge;
}

Responder::Step Responder::acknowledge(Request& r) {
  // Inside a message only where the requester asked; always at its end.
  if (ends_message(r.end_info.position) || r.end.bth.ack_req) ack(r.end.bth.psn);
  return Step::kDone;
}

Responder::Step Responder::pull_failed(Request& r) {
  // The run's payload could not be pulled from the sender. Nothing of it
  // counts: the message restarts where it stood, and the requester is asked
  // to send again from the expected PSN (as after a gap). Where the kernel
  // refuses cross-memory attach, peers are told to send packets instead.
  ++qp_.counters.run_pull_failures;
  if (r.pull_error == EPERM || r.pull_error == ENOSYS || r.pull_error == EACCES)
    qp_.engine->same_host().refuse_runs();
  if (starts_message(r.info.position)) recv_in_progress_ = write_in_progress_ = false;
  if (is_uc()) {
    drop_uc_message();
    return Step::kDone;
  }
  if (!nak_sent_) {
    set_nak_sent(true);
    ++qp_.counters.sequence_naks_sent;
    send_ack(epsn_, aeth::nak(aeth::kNakPsnSequenceError));
  }
  return Step::kDone;
}

Responder::Step Responder::fail(Request& r, aeth::NakCode nak, AsyncEventType event) {
  r.nak = nak;
  r.event = event;
  return Step::kError;
}

Responder::Step Responder::error(Request& r) {
  if (is_uc()) {
    // UC has no NAKs: an invalid or inaccessible request loses the message;
    // a local receive error (already completed by the caller) fails the QP.
    if (r.event == AsyncEventType::kQpFatal) {
      qp_.raise(AsyncEventType::kQpFatal);
      qp_.enter_error();
    } else {
      drop_uc_message();
    }
    return Step::kDone;
  }
  ++qp_.counters.remote_errors_naked;
  send_ack(r.h.bth.psn, aeth::nak(r.nak));
  qp_.raise(r.event);
  qp_.enter_error();
  return Step::kDone;
}

// ---- helpers

void Responder::drop_uc_message() {
  if (recv_in_progress_ || write_in_progress_) ++qp_.counters.uc_messages_dropped;
  recv_in_progress_ = write_in_progress_ = false;
  uc_dropping_ = true;
}

bool Responder::forced_rnr() const {
  const uint32_t forced = qp_.engine->forced_rnr_qpn();
  return forced == Engine::kAllQps || forced == qp_.qpn;
}

void Responder::rnr_nak(uint32_t psn) {
  ++qp_.counters.rnr_naks_sent;
  send_ack(psn, aeth::rnr_nak(qp_.attr.min_rnr_timer));
}

void Responder::ack(uint32_t psn) {
  // One ACK stands for at most a few: the requester's window must not wait
  // for a batch as long as itself.
  AckBatch* batch = qp_.engine->acknowledges_each_packet() ? nullptr : AckBatch::current();
  if (batch && (holds_ack_ || batch->add(qp_))) {
    holds_ack_ = true;
    held_ack_psn_ = psn;
    if (++held_acks_ == kAcksHeldAtMost) send_held_ack();
    return;
  }
  send_ack(psn, aeth::ack());
}

void Responder::send_held_ack() {
  held_acks_ = 0;
  if (!holds_ack_) return;
  holds_ack_ = false;
  // A QP sends its held ACK before it leaves the receiving states
  // (QpImpl::modify, enter_error), so none is left here; should one be, a
  // QP that no longer receives answers nothing.
  if (qp_.can_receive()) transmit_ack(held_ack_psn_, aeth::ack());
}

void Responder::send_ack(uint32_t psn, uint8_t syndrome) {
  send_held_ack();
  transmit_ack(psn, syndrome);
}

void Responder::transmit_ack(uint32_t psn, uint8_t syndrome) {
  packet::Headers h = qp_.make_headers(packet::Opcode::kRcAcknowledge, psn);
  h.aeth.syndrome = syndrome;
  h.aeth.msn = msn_ & packet::kPsnMask;
  qp_.transmit(h, {});
}

void Responder::send_atomic_ack(uint32_t psn, uint64_t orig) {
  send_held_ack();
  packet::Headers ack = qp_.make_headers(packet::Opcode::kRcAtomicAcknowledge, psn);
  ack.aeth.syndrome = aeth::ack();
  ack.aeth.msn = msn_ & packet::kPsnMask;
  ack.atomic_ack_eth.orig_data = orig;
  qp_.transmit(ack, {});
}

// Answers a READ request: the payload from [va, va+len) in path-MTU packets
// with PSNs from `psn` (IBTA 9.7.5.1.5). Every packet is read with the rkey
// checked again under the MR table's lock: should the MR be deregistered or
// its memory unmapped half-way, the rest is answered with a remote access
// NAK and the QP fails as it does for a WRITE or an atomic that cannot land.
void Responder::send_read_response(uint32_t psn, uint32_t rkey, uint64_t va, uint64_t len) {
  using packet::Opcode;
  const uint32_t m = qp_.mtu();
  const uint32_t count = len == 0 ? 1 : static_cast<uint32_t>((len + m - 1) / m);
  send_held_ack();
  // The response's packets may leave together (one system call on the UDP wire).
  WireBurst burst(qp_.engine->wire());
  for (uint32_t i = 0; i < count; ++i) {
    const bool first = i == 0, last = i + 1 == count;
    Opcode op = first && last ? Opcode::kRcReadResponseOnly
                : first       ? Opcode::kRcReadResponseFirst
                : last        ? Opcode::kRcReadResponseLast
                              : Opcode::kRcReadResponseMiddle;
    packet::Headers h = qp_.make_headers(op, packet::psn_add(psn, i));
    h.aeth.syndrome = aeth::ack();
    h.aeth.msn = msn_ & packet::kPsnMask;
    const uint64_t off = uint64_t(i) * m;
    const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(m, len - std::min(len, off)));
    if (chunk == 0) {
      qp_.transmit(h, {});
      continue;
    }
    if (!qp_.transmit_remote(h, rkey, va + off, chunk)) {
      ++qp_.counters.remote_errors_naked;
      send_ack(packet::psn_add(psn, i), aeth::nak(aeth::kNakRemoteAccessError));
      qp_.raise(AsyncEventType::kQpAccessErr);
      qp_.enter_error();
      return;
    }
  }
}

bool Responder::claim_receive() {
  if (holds_receive_) return true;
  if (qp_.srq) {
    if (!qp_.srq->impl().take(recv_wqe_, srq_sges_)) return false;
  } else {
    if (qp_.rq.empty()) return false;
    const RecvWqe& w = qp_.rq.front();
    recv_wqe_ = ReceiveWqeRef{w.wr_id, w.num_sge, w.length, qp_.rq.front_sges()};
  }
  holds_receive_ = true;
  return true;
}

void Responder::release_receive() {
  if (holds_receive_ && qp_.srq) qp_.srq->impl().give_back(recv_wqe_);
  holds_receive_ = false;
}

void Responder::retire_receive() {
  if (!qp_.srq) ++qp_.rq.head;
  holds_receive_ = false;
  qp_.publish_receives();
}

void Responder::complete_receive(const packet::Headers& h, bool is_send, bool has_imm,
                                 bool has_inv) {
  Completion c;
  c.wr_id = recv_wqe_.wr_id;
  c.opcode = is_send ? WcOpcode::kRecv : WcOpcode::kRecvRdmaWithImm;
  c.byte_len = static_cast<uint32_t>(is_send ? recv_offset_ : write_length_);
  c.qp_num = qp_.qpn;
  c.src_qp = qp_.attr.dest_qp_num;
  c.slid = h.lrh.slid;
  c.sl = h.lrh.sl;
  if (has_imm) {
    c.imm_data = h.imm_data;
    c.wc_flags |= kWcWithImm;
  }
  if (has_inv) {
    c.invalidated_rkey = h.ieth_rkey;
    c.wc_flags |= kWcWithInv;
  }
  if (h.has_grh) c.wc_flags |= kWcGrh;
  retire_receive();
  recv_in_progress_ = false;
  trace::receive_completed(qp_, WcStatus::kSuccess);
  qp_.recv_cq->impl().push(c, h.bth.solicited);
}

void Responder::fail_receive(WcStatus status) {
  if (!claim_receive()) return;
  Completion c;
  c.wr_id = recv_wqe_.wr_id;
  c.status = status;
  c.opcode = WcOpcode::kRecv;
  c.qp_num = qp_.qpn;
  retire_receive();
  recv_in_progress_ = false;
  trace::receive_completed(qp_, status);
  qp_.recv_cq->impl().push(c, false);
}

void Responder::flush() {
  if (qp_.srq) {
    // The SRQ's other WQEs stay for the other QPs.
    if (holds_receive_) fail_receive(WcStatus::kWrFlushErr);
  } else {
    while (!qp_.rq.empty()) fail_receive(WcStatus::kWrFlushErr);
  }
  recv_in_progress_ = write_in_progress_ = false;
}

}  // namespace softverbs
