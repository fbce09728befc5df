// The requester: turns send WQEs into request packets. Each WQE takes a
// contiguous run of PSNs: one per path-MTU segment for SEND and WRITE, one
// per expected response packet for READ (IBTA 9.7.1).
#include <algorithm>

#include "emulator/qp_impl.h"

namespace softverbs {
namespace {

using packet::Opcode;

// Unacknowledged packets the requester lets fly before it waits for ACKs.
// Kept modest: go back N resends up to this many after one loss.
constexpr uint32_t kMaxPacketsInFlight = 256;
// Within a long message, ask for an ACK this often so the window keeps
// moving (the responder acknowledges only where AckReq is set).
constexpr uint32_t kAckRequestInterval = kMaxPacketsInFlight / 4;

Opcode rc_send_opcode(const SendWqe& w, bool first, bool last) {
  const bool imm = w.opcode == WrOpcode::kSendWithImm;
  if (first && last) return imm ? Opcode::kRcSendOnlyImm : Opcode::kRcSendOnly;
  if (first) return Opcode::kRcSendFirst;
  if (!last) return Opcode::kRcSendMiddle;
  return imm ? Opcode::kRcSendLastImm : Opcode::kRcSendLast;
}

Opcode rc_write_opcode(const SendWqe& w, bool first, bool last) {
  const bool imm = w.opcode == WrOpcode::kRdmaWriteWithImm;
  if (first && last) return imm ? Opcode::kRcWriteOnlyImm : Opcode::kRcWriteOnly;
  if (first) return Opcode::kRcWriteFirst;
  if (!last) return Opcode::kRcWriteMiddle;
  return imm ? Opcode::kRcWriteLastImm : Opcode::kRcWriteLast;
}

// UC opcodes are the RC ones with the transport bits 001 (IBTA 9.2, table 35).
constexpr uint8_t kUcTransportBits = 0x20;

Opcode message_opcode(QpType type, const SendWqe& w, bool is_send, bool first, bool last) {
  Opcode rc = is_send ? rc_send_opcode(w, first, last) : rc_write_opcode(w, first, last);
  if (type == QpType::kRc) return rc;
  return static_cast<Opcode>(static_cast<uint8_t>(rc) | kUcTransportBits);
}

}  // namespace

uint32_t QpImpl::packets_of(const SendWqe& w) const {
  const uint64_t m = mtu();
  return w.length == 0 ? 1 : static_cast<uint32_t>((w.length + m - 1) / m);
}

packet::Headers QpImpl::make_headers(Opcode opcode, uint32_t psn) const {
  packet::Headers h;
  const DeviceDescription& self_dev = hca->description();
  h.lrh.sl = attr.av.sl;
  h.lrh.slid = self_dev.lid;
  h.lrh.dlid = attr.av.dlid;
  if (attr.av.is_global) {
    h.has_grh = true;
    h.grh.traffic_class = attr.av.traffic_class;
    h.grh.flow_label = attr.av.flow_label;
    h.grh.hop_limit = attr.av.hop_limit;
    h.grh.sgid = attr.av.sgid_index < self_dev.gids.size() ? self_dev.gids[attr.av.sgid_index]
                                                            : Gid{};
    h.grh.dgid = attr.av.dgid;
  }
  h.bth.opcode = opcode;
  h.bth.pkey = kDefaultPkey;
  h.bth.dest_qp = attr.dest_qp_num;
  h.bth.psn = psn & packet::kPsnMask;
  return h;
}

void QpImpl::transmit(const packet::Headers& h, std::span<const uint8_t> payload) {
  if (!engine->port_up(device_index)) {
    ++counters.port_down_drops;  // a downed link carries nothing
    return;
  }
  ++counters.packets_sent;
  engine->transmit(peer_device_index, attr.dest_qp_num, h, payload);
}

void QpImpl::requester_run() {
  if (attr.state != QpState::kRts || rnr_deadline_ns) return;
  const uint32_t m = mtu();
  if (scratch.size() < m) scratch.resize(packet::kMaxFrameBytes);
  const uint32_t max_reads = std::max<uint32_t>(attr.max_rd_atomic, 1);

  while (sq_next != sq_tail) {
    SendWqe& w = sq_at(sq_next);
    if (w.done) {  // completed with an error while queued
      ++sq_next;
      continue;
    }
    if (static_cast<uint32_t>(packet::psn_diff(npsn, una_psn)) >= kMaxPacketsInFlight) break;
    const bool is_read = w.opcode == WrOpcode::kRdmaRead;
    const bool is_atomic = is_rd_atomic(w) && !is_read;

    if (send_offset == 0 && !w.started) {
      // IBTA 10.8.3.3: a fenced WR waits for earlier READs and atomics.
      if ((w.flags & kWrFence) && reads_outstanding) break;
      if ((is_read || is_atomic) && reads_outstanding >= max_reads) break;
      if (is_atomic && w.length != sizeof(uint64_t)) {
        // The original value needs exactly 8 bytes of local buffer.
        complete_send(w, WcStatus::kLocLenErr);
        enter_error();
        return;
      }
      w.started = true;
      w.first_psn = npsn;
      w.last_psn = is_atomic ? npsn : packet::psn_add(npsn, packets_of(w) - 1);
      w.next_response_psn = npsn;
      if (is_read || is_atomic) ++reads_outstanding;
    }
    // A PSN below the highest ever sent goes out again: a retransmission.
    if (packet::psn_diff(npsn, psn_high) < 0) ++counters.retransmitted_packets;

    if (is_atomic) {
      packet::Headers h = make_headers(w.opcode == WrOpcode::kAtomicCmpSwp ? Opcode::kRcCompareSwap
                                                                          : Opcode::kRcFetchAdd,
                                       npsn);
      h.bth.ack_req = true;
      h.atomic_eth.va = w.remote_addr;
      h.atomic_eth.rkey = w.rkey;
      if (w.opcode == WrOpcode::kAtomicCmpSwp) {
        h.atomic_eth.compare = w.compare_add;
        h.atomic_eth.swap_add = w.swap;
      } else {
        h.atomic_eth.swap_add = w.compare_add;
      }
      transmit(h, {});
      ack_request_next = false;  // an atomic always asks
      npsn = packet::psn_add(npsn, 1);
      if (packet::psn_diff(npsn, psn_high) > 0) psn_high = npsn;
      ++sq_next;
      arm_retransmit_timer();
      continue;
    }

    if (is_read) {
      // One request carries the whole read (or, after a rewind, the part
      // not yet received); the responder answers with packets_of() packets.
      packet::Headers h = make_headers(Opcode::kRcReadRequest, npsn);
      h.bth.ack_req = true;
      h.reth.va = w.remote_addr + send_offset;
      h.reth.rkey = w.rkey;
      h.reth.dma_len = static_cast<uint32_t>(w.length - send_offset);
      transmit(h, {});
      ack_request_next = false;  // a READ request always asks
      npsn = packet::psn_add(w.last_psn, 1);
      if (packet::psn_diff(npsn, psn_high) > 0) psn_high = npsn;
      send_offset = 0;
      ++sq_next;
      arm_retransmit_timer();
      continue;
    }

    // SEND / WRITE: one packet per path-MTU segment.
    const bool first = send_offset == 0;
    const uint64_t left = w.length - send_offset;
    const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(left, m));
    const bool last = left <= m;
    std::span<uint8_t> payload(scratch.data(), chunk);
    if (w.inline_len) {
      std::copy_n(sq_inline_at(sq_next) + send_offset, chunk, payload.data());
    } else if (chunk) {
      WcStatus st = gather(sq_sges_at(sq_next), w.num_sge, send_offset, payload);
      if (st != WcStatus::kSuccess) {
        // IBTA 10.7.3.1: a local protection/length error completes the WR
        // in error; an RC QP goes to ERR, a UC QP's send queue to SQE.
        complete_send(w, st);
        if (type == QpType::kUc) return enter_send_queue_error();
        enter_error();
        raise(AsyncEventType::kQpFatal);
        return;
      }
    }
    const bool is_send = w.opcode == WrOpcode::kSend || w.opcode == WrOpcode::kSendWithImm;
    packet::Headers h = make_headers(message_opcode(type, w, is_send, first, last), npsn);
    if (first && !is_send) {
      h.reth.va = w.remote_addr;
      h.reth.rkey = w.rkey;
      h.reth.dma_len = static_cast<uint32_t>(w.length);
    }
    if (last) {
      h.imm_data = w.imm_data;
      h.bth.solicited = (w.flags & kWrSolicited) != 0;
      h.bth.ack_req = true;
    } else if (packet::psn_diff(npsn, w.first_psn) % kAckRequestInterval ==
                   kAckRequestInterval - 1 ||
               ack_request_next) {
      h.bth.ack_req = true;
    }
    ack_request_next = false;
    if (type == QpType::kUc) h.bth.ack_req = false;  // UC is never acknowledged
    transmit(h, payload);
    npsn = packet::psn_add(npsn, 1);
    if (packet::psn_diff(npsn, psn_high) > 0) psn_high = npsn;
    if (type == QpType::kRc) arm_retransmit_timer();
    if (last) {
      send_offset = 0;
      ++sq_next;
      if (type == QpType::kUc) {
        // UC: the WR is done once its last packet is on the wire (IBTA 9.8.3).
        complete_send(w, WcStatus::kSuccess);
        una_psn = npsn;
        retire_completed();
      }
    } else {
      send_offset += chunk;
    }
  }
}

void QpImpl::rewind_to(uint32_t psn) {
  // Go back N (IBTA 9.7.5.1.3): resend from the oldest WQE not yet done that
  // ends at or after `psn`, from `psn` within it (a READ from its first
  // missing response).
  for (uint64_t n = sq_head; n != sq_tail; ++n) {
    SendWqe& w = sq_at(n);
    if (!w.started || w.done) continue;
    if (packet::psn_diff(w.last_psn, psn) < 0) continue;
    uint32_t from = packet::psn_diff(psn, w.first_psn) > 0 ? psn : w.first_psn;
    if (w.opcode == WrOpcode::kRdmaRead && packet::psn_diff(w.next_response_psn, from) > 0)
      from = w.next_response_psn;  // responses before it arrived already
    if (is_rd_atomic(w) && w.opcode != WrOpcode::kRdmaRead) from = w.first_psn;
    for (uint64_t k = n + 1; k != sq_tail; ++k) {
      SendWqe& later = sq_at(k);
      if (!later.started || later.done) continue;
      if (is_rd_atomic(later)) --reads_outstanding;
      later.started = false;
    }
    sq_next = n;
    send_offset = static_cast<uint64_t>(packet::psn_diff(from, w.first_psn)) * mtu();
    npsn = from;
    ack_request_next = true;
    return;
  }
}

}  // namespace softverbs
