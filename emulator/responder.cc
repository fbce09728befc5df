// The responder: classifies each request by PSN (IBTA 9.7.4.1.x), executes
// the expected ones, answers duplicates, NAKs the first out-of-sequence one,
// and acknowledges.
#include <algorithm>

#include "emulator/aeth.h"
#include "emulator/qp_impl.h"

namespace softverbs {
namespace {

using packet::Operation;
using packet::Position;

bool starts_message(Position p) { return p == Position::kFirst || p == Position::kOnly; }
bool ends_message(Position p) { return p == Position::kLast || p == Position::kOnly; }

}  // namespace

void QpImpl::send_ack(uint32_t psn, uint8_t syndrome) {
  packet::Headers h = make_headers(packet::Opcode::kRcAcknowledge, psn);
  h.aeth.syndrome = syndrome;
  h.aeth.msn = msn & packet::kPsnMask;
  transmit(h, {});
}

namespace {

// Answers a READ request: the payload from [va, va+len) in path-MTU packets
// with PSNs from `psn` (IBTA 9.7.5.1.5). The rkey was checked by the caller.
void send_read_response(QpImpl& qp, uint32_t psn, uint64_t va, uint64_t len) {
  using packet::Opcode;
  const uint32_t m = qp.mtu();
  const uint32_t count = len == 0 ? 1 : static_cast<uint32_t>((len + m - 1) / m);
  for (uint32_t i = 0; i < count; ++i) {
    const bool first = i == 0, last = i + 1 == count;
    Opcode op = first && last ? Opcode::kRcReadResponseOnly
                : first       ? Opcode::kRcReadResponseFirst
                : last        ? Opcode::kRcReadResponseLast
                              : Opcode::kRcReadResponseMiddle;
    packet::Headers h = qp.make_headers(op, packet::psn_add(psn, i));
    h.aeth.syndrome = aeth::ack();
    h.aeth.msn = qp.msn & packet::kPsnMask;
    const uint64_t off = uint64_t(i) * m;
    const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(m, len - std::min(len, off)));
    // The rkey check proved [va, va+len) is registered memory of this process.
    qp.transmit(h, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(va + off), chunk));
  }
}

}  // namespace

void QpImpl::receive(const packet::DecodedPacket& pkt) {
  const packet::OpcodeInfo& info = packet::opcode_info(static_cast<uint8_t>(pkt.headers.bth.opcode));
  if (info.transport != type) return;  // not for this QP type: silently dropped
  if (!info.is_request) {
    if (can_send() || attr.state == QpState::kSqe) on_response(pkt);
    return;
  }
  if (!can_receive()) return;
  if (pkt.headers.bth.pkey != kDefaultPkey) return;  // P_Key mismatch: dropped
  ++counters.packets_received;

  if (!comm_established && attr.state == QpState::kRtr) {
    // IBTA 11.6.3: first packet received in RTR.
    comm_established = true;
    raise(AsyncEventType::kCommEst);
  }
  comm_established = true;
  if (type == QpType::kUc) return receive_uc(pkt, info);

  const packet::Headers& h = pkt.headers;
  const int32_t delta = packet::psn_diff(h.bth.psn, epsn);
  if (delta > 0) {
    // Out of sequence: one NAK per gap, then silence until the expected PSN.
    if (nak_sent) {
      ++counters.out_of_sequence_dropped;
    } else {
      nak_sent = true;
      ++counters.sequence_naks_sent;
      // The NAK carries the PSN the responder expects (IBTA 9.7.5.2.2).
      send_ack(epsn, aeth::nak(aeth::kNakPsnSequenceError));
    }
    return;
  }
  if (delta < 0) {
    // Duplicate (IBTA 9.7.5.1.4): re-execute READs, answer atomics from the
    // saved result, re-ACK the rest without delivering again.
    ++counters.duplicate_requests;
    if (info.operation == Operation::kCompareSwap || info.operation == Operation::kFetchAdd) {
      for (const AtomicResult& r : atomic_results) {
        if (r.valid && r.psn == h.bth.psn) {
          ++counters.atomic_replays;
          packet::Headers ack = make_headers(packet::Opcode::kRcAtomicAcknowledge, h.bth.psn);
          ack.aeth.syndrome = aeth::ack();
          ack.aeth.msn = msn & packet::kPsnMask;
          ack.atomic_ack_eth.orig_data = r.orig;
          transmit(ack, {});
        }
      }
    } else if (info.operation == Operation::kReadRequest) {
      if (remote_access_ok(h.reth.rkey, h.reth.va, h.reth.dma_len, kAccessRemoteRead))
        send_read_response(*this, h.bth.psn, h.reth.va, h.reth.dma_len);
    } else if (h.bth.ack_req || ends_message(info.position)) {
      send_ack(packet::psn_add(epsn, packet::kPsnMask), aeth::ack());
    }
    return;
  }
  nak_sent = false;

  auto fatal_nak = [&](aeth::NakCode code, AsyncEventType event) {
    ++counters.remote_errors_naked;
    send_ack(h.bth.psn, aeth::nak(code));
    raise(event);
    enter_error();
  };

  switch (info.operation) {
    case Operation::kSend: {
      if (starts_message(info.position)) {
        if (recv_in_progress) return fatal_nak(aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
        const bool forced = engine->forced_rnr_qpn == Engine::kAllQps ||
                            engine->forced_rnr_qpn == qpn;
        if (forced) ++counters.forced_rnr_naks;
        if (rq_head == rq_tail || forced) {
          // No receive WQE: Receiver Not Ready (IBTA 9.7.5.2.8).
          ++counters.rnr_naks_sent;
          send_ack(h.bth.psn, aeth::rnr_nak(attr.min_rnr_timer));
          return;
        }
        recv_in_progress = true;
        recv_offset = 0;
      } else if (!recv_in_progress) {
        return fatal_nak(aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
      }
      RecvWqe& r = rq_at(rq_head);
      if (recv_offset + pkt.payload.size() > r.length) {
        // The message does not fit the receive buffer: the receive completes
        // with a length error and the requester gets Invalid Request.
        fail_receive(WcStatus::kLocLenErr);
        return fatal_nak(aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
      }
      WcStatus st = scatter(rq_sges_at(rq_head), r.num_sge, recv_offset, pkt.payload);
      if (st != WcStatus::kSuccess) {
        fail_receive(st);
        return fatal_nak(aeth::kNakRemoteOperationalError, AsyncEventType::kQpFatal);
      }
      recv_offset += pkt.payload.size();
      break;
    }
    case Operation::kWrite: {
      if ((info.headers & packet::kHdrImmDt) && rq_head == rq_tail) {
        // WRITE with immediate consumes a receive WQE; without one the
        // packet is refused whole (RNR) and retried later, nothing placed.
        ++counters.rnr_naks_sent;
        send_ack(h.bth.psn, aeth::rnr_nak(attr.min_rnr_timer));
        return;
      }
      if (starts_message(info.position)) {
        if (write_in_progress) return fatal_nak(aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
        if (!remote_access_ok(h.reth.rkey, h.reth.va, h.reth.dma_len, kAccessRemoteWrite))
          return fatal_nak(aeth::kNakRemoteAccessError, AsyncEventType::kQpAccessErr);
        write_in_progress = true;
        write_va = h.reth.va;
        write_remaining = h.reth.dma_len;
        write_rkey = h.reth.rkey;
        write_length = h.reth.dma_len;
      } else if (!write_in_progress) {
        return fatal_nak(aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
      }
      if (pkt.payload.size() > write_remaining)
        return fatal_nak(aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
      std::copy(pkt.payload.begin(), pkt.payload.end(), reinterpret_cast<uint8_t*>(write_va));
      write_va += pkt.payload.size();
      write_remaining -= pkt.payload.size();
      if (ends_message(info.position)) {
        write_in_progress = false;
        if (write_remaining != 0)
          return fatal_nak(aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
      }
      break;
    }
    case Operation::kReadRequest: {
      if (!remote_access_ok(h.reth.rkey, h.reth.va, h.reth.dma_len, kAccessRemoteRead))
        return fatal_nak(aeth::kNakRemoteAccessError, AsyncEventType::kQpAccessErr);
      ++msn;
      const uint32_t m = mtu();
      const uint32_t count =
          h.reth.dma_len == 0 ? 1 : static_cast<uint32_t>((uint64_t(h.reth.dma_len) + m - 1) / m);
      epsn = packet::psn_add(h.bth.psn, count);
      send_read_response(*this, h.bth.psn, h.reth.va, h.reth.dma_len);
      return;
    }
    case Operation::kCompareSwap:
    case Operation::kFetchAdd: {
      const uint64_t va = h.atomic_eth.va;
      if (!remote_access_ok(h.atomic_eth.rkey, va, sizeof(uint64_t), kAccessRemoteAtomic))
        return fatal_nak(aeth::kNakRemoteAccessError, AsyncEventType::kQpAccessErr);
      // IBTA 9.4.5: atomics address an aligned 64-bit word.
      if (va % sizeof(uint64_t))
        return fatal_nak(aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
      auto* word = reinterpret_cast<uint64_t*>(va);
      uint64_t orig;
      if (info.operation == Operation::kCompareSwap) {
        orig = h.atomic_eth.compare;
        __atomic_compare_exchange_n(word, &orig, h.atomic_eth.swap_add, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_SEQ_CST);
      } else {
        orig = __atomic_fetch_add(word, h.atomic_eth.swap_add, __ATOMIC_SEQ_CST);
      }
      if (atomic_results.empty()) atomic_results.resize(1);
      atomic_results[next_atomic_slot++ % atomic_results.size()] = {h.bth.psn, orig, true};
      ++msn;
      epsn = packet::psn_add(h.bth.psn, 1);
      packet::Headers ack = make_headers(packet::Opcode::kRcAtomicAcknowledge, h.bth.psn);
      ack.aeth.syndrome = aeth::ack();
      ack.aeth.msn = msn & packet::kPsnMask;
      ack.atomic_ack_eth.orig_data = orig;
      transmit(ack, {});
      return;
    }
    default:
      return fatal_nak(aeth::kNakInvalidRequest, AsyncEventType::kQpReqErr);
  }

  epsn = packet::psn_add(h.bth.psn, 1);
  if (!ends_message(info.position)) {
    if (h.bth.ack_req) send_ack(h.bth.psn, aeth::ack());
    return;
  }

  // Message complete.
  ++msn;
  const bool has_imm = info.headers & packet::kHdrImmDt;
  if (info.operation == Operation::kSend || has_imm) {
    complete_receive(h, info.operation == Operation::kSend, has_imm);
  }
  send_ack(h.bth.psn, aeth::ack());
}

void QpImpl::receive_uc(const packet::DecodedPacket& pkt, const packet::OpcodeInfo& info) {
  // UC (IBTA 9.8.3): no ACKs, no NAKs, no retries. A gap in PSNs loses the
  // message in progress silently; its receive WQE is used for the next one.
  const packet::Headers& h = pkt.headers;
  auto drop_message = [&] {
    if (recv_in_progress || write_in_progress) ++counters.uc_messages_dropped;
    recv_in_progress = write_in_progress = false;
    uc_dropping = !ends_message(info.position);
  };
  if (h.bth.psn != epsn) {
    drop_message();
    uc_dropping = true;
  }
  epsn = packet::psn_add(h.bth.psn, 1);
  if (starts_message(info.position)) {
    if (recv_in_progress || write_in_progress) {
      ++counters.uc_messages_dropped;  // its end was lost
      recv_in_progress = write_in_progress = false;
    }
    uc_dropping = false;
  }
  if (uc_dropping) return;
  const bool has_imm = info.headers & packet::kHdrImmDt;

  if (info.operation == Operation::kSend) {
    if (starts_message(info.position)) {
      if (rq_head == rq_tail) return drop_message();  // no WQE: the message is lost
      recv_in_progress = true;
      recv_offset = 0;
    }
    RecvWqe& r = rq_at(rq_head);
    if (recv_offset + pkt.payload.size() > r.length ||
        scatter(rq_sges_at(rq_head), r.num_sge, recv_offset, pkt.payload) != WcStatus::kSuccess) {
      // A receive error completes the WQE in error and the QP fails.
      fail_receive(recv_offset + pkt.payload.size() > r.length ? WcStatus::kLocLenErr
                                                               : WcStatus::kLocProtErr);
      raise(AsyncEventType::kQpFatal);
      enter_error();
      return;
    }
    recv_offset += pkt.payload.size();
  } else {  // RDMA WRITE
    if (starts_message(info.position)) {
      if (!remote_access_ok(h.reth.rkey, h.reth.va, h.reth.dma_len, kAccessRemoteWrite))
        return drop_message();
      write_in_progress = true;
      write_va = h.reth.va;
      write_remaining = h.reth.dma_len;
      write_length = h.reth.dma_len;
    }
    if (pkt.payload.size() > write_remaining) return drop_message();
    if (has_imm && rq_head == rq_tail) return drop_message();
    std::copy(pkt.payload.begin(), pkt.payload.end(), reinterpret_cast<uint8_t*>(write_va));
    write_va += pkt.payload.size();
    write_remaining -= pkt.payload.size();
  }
  if (!ends_message(info.position)) return;
  const bool is_send = info.operation == Operation::kSend;
  recv_in_progress = write_in_progress = false;
  if (!is_send && !has_imm) return;
  complete_receive(h, is_send, has_imm);
}

void QpImpl::complete_receive(const packet::Headers& h, bool is_send, bool has_imm) {
  RecvWqe& r = rq_at(rq_head);
  Completion c;
  c.wr_id = r.wr_id;
  c.opcode = is_send ? WcOpcode::kRecv : WcOpcode::kRecvRdmaWithImm;
  c.byte_len = static_cast<uint32_t>(is_send ? recv_offset : write_length);
  c.qp_num = qpn;
  c.src_qp = attr.dest_qp_num;
  c.slid = h.lrh.slid;
  c.sl = h.lrh.sl;
  if (has_imm) {
    c.imm_data = h.imm_data;
    c.wc_flags |= kWcWithImm;
  }
  if (h.has_grh) c.wc_flags |= kWcGrh;
  ++rq_head;
  recv_in_progress = false;
  recv_cq->impl().push(c, h.bth.solicited);
}

void QpImpl::fail_receive(WcStatus status) {
  RecvWqe& r = rq_at(rq_head);
  Completion c;
  c.wr_id = r.wr_id;
  c.status = status;
  c.opcode = WcOpcode::kRecv;
  c.qp_num = qpn;
  ++rq_head;
  recv_in_progress = false;
  recv_cq->impl().push(c, false);
}

}  // namespace softverbs