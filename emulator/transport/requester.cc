// The requester's steps. See requester.h for the machine.
#include "emulator/transport/requester.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "emulator/objects/qp_impl.h"
#include "emulator/packet/roce_v2.h"
#include "emulator/trace/protocol_events.h"
#include "emulator/wire/process_identity.h"
#include "emulator/wire/wire_burst.h"

namespace softverbs {
namespace {

using packet::Opcode;

// Within a long message, ask for an ACK this often so the window keeps
// moving (the responder acknowledges only where AckReq is set).
constexpr uint32_t kAckRequestInterval = Requester::kMaxPacketsInFlight / 4;

Opcode rc_send_opcode(const SendWqe& w, bool first, bool last) {
  const bool imm = w.opcode == WrOpcode::kSendWithImm;
  const bool inv = w.opcode == WrOpcode::kSendWithInv;
  if (first && last)
    return imm ? Opcode::kRcSendOnlyImm : inv ? Opcode::kRcSendOnlyInv : Opcode::kRcSendOnly;
  if (first) return Opcode::kRcSendFirst;
  if (!last) return Opcode::kRcSendMiddle;
  return imm ? Opcode::kRcSendLastImm : inv ? Opcode::kRcSendLastInv : Opcode::kRcSendLast;
}

Opcode rc_write_opcode(const SendWqe& w, bool first, bool last) {
  const bool imm = w.opcode == WrOpcode::kRdmaWriteWithImm;
  if (first && last) return imm ? Opcode::kRcWriteOnlyImm : Opcode::kRcWriteOnly;
  if (first) return Opcode::kRcWriteFirst;
  if (!last) return Opcode::kRcWriteMiddle;
  return imm ? Opcode::kRcWriteLastImm : Opcode::kRcWriteLast;
}

// UC opcodes are the RC ones with the transport bits 001 (IBTA 9.2, table
// 35). XRC's stay RC here: QpImpl::make_headers gives every packet of an XRC
// QP its transport bits.
constexpr uint8_t kUcTransportBits = 0x20;

Opcode message_opcode(QpType type, const SendWqe& w, bool first, bool last) {
  Opcode rc = w.is_send() ? rc_send_opcode(w, first, last) : rc_write_opcode(w, first, last);
  if (type != QpType::kUc) return rc;
  return static_cast<Opcode>(static_cast<uint8_t>(rc) | kUcTransportBits);
}

}  // namespace

uint32_t Requester::packets_of(const SendWqe& w) const {
  const uint64_t m = qp_.mtu();
  return w.length == 0 ? 1 : static_cast<uint32_t>((w.length + m - 1) / m);
}

void Requester::start(uint32_t sq_psn) { npsn_ = psn_high_ = sq_psn; }

void Requester::reset() {
  wqe_ = nullptr;
  npsn_ = psn_high_ = resend_rounds_ = 0;
  send_offset_ = 0;
  ack_request_next_ = payload_placed_ = false;
  rd_atomic_outstanding_ = 0;
  started_end_ = drain_end_ = 0;
  window_.reset();
  route_.reset();
}

bool Requester::drained() const { return qp_.sq.head >= drain_end_; }

void Requester::run() {
  if (!qp_.can_send() || qp_.completer.waiting_for_rnr()) return;
  // What this pass sends may leave together (one system call on the UDP wire).
  WireBurst burst(qp_.engine->wire());
  Step step = Step::kNextWqe;
  while (step != Step::kStop) {
    switch (step) {
      case Step::kNextWqe: step = next_wqe(); break;
      case Step::kCheckLimits: step = check_limits(); break;
      case Step::kStartWqe: step = start_wqe(); break;
      case Step::kExecuteDirect: step = execute_direct(); break;
      case Step::kStartPackets: step = start_packets(); break;
      case Step::kSendAtomic: step = send_atomic(); break;
      case Step::kSendAtomicWrite: step = send_atomic_write(); break;
      case Step::kSendReadRequest: step = send_read_request(); break;
      case Step::kSendSegment: step = send_segment(); break;
      case Step::kSendRun: step = send_run(); break;
      case Step::kSendDatagram: step = send_datagram(); break;
      case Step::kLocalOperation: step = local_operation(); break;
      case Step::kStop: break;
    }
  }
}

uint32_t Requester::packets_in_flight() const {
  // Only reliable QPs are acknowledged: a UC message of any length goes out whole.
  if (!is_reliable(qp_.type)) return 0;
  return static_cast<uint32_t>(packet::psn_diff(npsn_, qp_.completer.unacked_psn()));
}

Requester::Step Requester::next_wqe() {
  SendQueue& sq = qp_.sq;
  while (sq.next != sq.tail && sq.at(sq.next).done) ++sq.next;  // failed while queued
  if (sq.next == sq.tail) return Step::kStop;
  // SQD: only what had begun before the drain goes out (again).
  if (qp_.attr.state == QpState::kSqd && sq.next >= drain_end_) return Step::kStop;
  wqe_ = &sq.at(sq.next);
  return Step::kCheckLimits;
}

Requester::Step Requester::check_limits() {
  if (packets_in_flight() >= window_.packets()) return Step::kStop;
  if (send_offset_ != 0 || wqe_->started) return Step::kStartWqe;
  // IBTA 10.8.3.3: a fenced WR waits for earlier READs and atomics.
  if ((wqe_->flags & kWrFence) && rd_atomic_outstanding_) return Step::kStop;
  const uint32_t max_rd_atomic = std::max<uint32_t>(qp_.attr.max_rd_atomic, 1);
  if (wqe_->is_rd_atomic() && rd_atomic_outstanding_ >= max_rd_atomic) return Step::kStop;
  return Step::kStartWqe;
}

Requester::Step Requester::start_wqe() {
  SendWqe& w = *wqe_;
  if (w.is_local()) return Step::kLocalOperation;
  if (send_offset_ != 0 || w.started) return Step::kStartPackets;  // under way
  const bool quiet = npsn_ == psn_high_ && packets_in_flight() == 0 && rd_atomic_outstanding_ == 0;
  switch (route_.choose(w, quiet)) {
    case SameHostRoute::Travel::kDirect: return Step::kExecuteDirect;
    case SameHostRoute::Travel::kAfterAcks: return Step::kStop;  // the ACK runs us again
    case SameHostRoute::Travel::kPackets: break;
  }
  return Step::kStartPackets;
}

Requester::Step Requester::start_packets() {
  SendWqe& w = *wqe_;
  if (send_offset_ == 0 && !w.started) {
    if (w.is_atomic() && w.length != sizeof(uint64_t)) {
      // The original value needs exactly 8 bytes of local buffer.
      qp_.completer.complete(w, WcStatus::kLocLenErr);
      qp_.enter_error();
      return Step::kStop;
    }
    w.started = true;
    started_end_ = std::max(started_end_, qp_.sq.next + 1);
    w.first_psn = npsn_;
    w.last_psn = w.is_atomic() ? npsn_ : packet::psn_add(npsn_, packets_of(w) - 1);
    w.next_response_psn = npsn_;
    if (w.is_rd_atomic()) ++rd_atomic_outstanding_;
  }
  // A PSN below the highest ever sent goes out again: a retransmission.
  if (packet::psn_diff(npsn_, psn_high_) < 0) ++qp_.counters.retransmitted_packets;
  if (qp_.type == QpType::kUd) return Step::kSendDatagram;
  if (w.is_atomic()) return Step::kSendAtomic;
  if (w.opcode == WrOpcode::kAtomicWrite) return Step::kSendAtomicWrite;
  if (w.is_read()) return Step::kSendReadRequest;
  if (payload_placed_) return Step::kSendRun;
  return route_.as_run(w, send_offset_, packets_in_flight(), window_.packets()) ? Step::kSendRun
                                                                                : Step::kSendSegment;
}

Requester::Step Requester::execute_direct() {
  SendWqe& w = *wqe_;
  const uint64_t index = qp_.sq.next;
  uint64_t original = 0;  // a compare-and-swap's or fetch-and-add's answer
  if (w.is_send()) {
    // Accepted on the target's entry and in its ring: done, as a WRITE
    // executed directly is.
    if (!route_.place_send(w, index, segment_headers(w, npsn_, true, true)))
      return Step::kStartPackets;
    ++qp_.counters.sends_placed;
  } else {
    if (!route_.execute(w, index, npsn_, original)) return Step::kStartPackets;
    if (w.opcode == WrOpcode::kRdmaWriteWithImm) {
      // Its bytes are in place; a run frame without payload stands for its
      // packets, and the target's responder takes a receive WQE, completes
      // and acknowledges it as for any.
      payload_placed_ = true;
      ++qp_.counters.payloads_placed;
      return Step::kStartPackets;
    }
    ++qp_.counters.direct_operations;
  }
  w.started = true;
  started_end_ = std::max(started_end_, index + 1);
  w.first_psn = npsn_;
  w.last_psn = packet::psn_add(npsn_, packets_of(w) - 1);
  advance_psn(packet::psn_add(w.last_psn, 1));
  finish_wqe();
  qp_.completer.executed_directly(w, index, original);
  return Step::kNextWqe;
}

Requester::Step Requester::send_atomic() {
  const SendWqe& w = *wqe_;
  const bool cmp_swap = w.opcode == WrOpcode::kAtomicCmpSwp;
  packet::Headers h =
      request_headers(w, cmp_swap ? Opcode::kRcCompareSwap : Opcode::kRcFetchAdd, npsn_);
  h.bth.ack_req = true;
  h.atomic_eth.va = w.remote_addr;
  h.atomic_eth.rkey = w.rkey;
  h.atomic_eth.swap_add = cmp_swap ? w.swap : w.compare_add;
  h.atomic_eth.compare = cmp_swap ? w.compare_add : 0;
  qp_.transmit(h, {});
  ack_request_next_ = false;  // an atomic always asks
  advance_psn(packet::psn_add(npsn_, 1));
  finish_wqe();
  qp_.completer.arm_retransmit_timer();
  return Step::kNextWqe;
}

Requester::Step Requester::send_atomic_write() {
  // The 8 bytes ride as the payload, acknowledged as a WRITE's.
  const SendWqe& w = *wqe_;
  packet::Headers h = request_headers(w, Opcode::kRcAtomicWrite, npsn_);
  h.bth.ack_req = true;
  h.reth.va = w.remote_addr;
  h.reth.rkey = w.rkey;
  h.reth.dma_len = sizeof(uint64_t);
  uint8_t data[sizeof(uint64_t)];
  std::memcpy(data, &w.atomic_write_data, sizeof data);
  qp_.transmit(h, data);
  ack_request_next_ = false;
  advance_psn(packet::psn_add(npsn_, 1));
  finish_wqe();
  qp_.completer.arm_retransmit_timer();
  return Step::kNextWqe;
}

packet::Headers Requester::read_request_headers(const SendWqe& w, uint32_t psn,
                                                uint64_t offset) const {
  if (w.opcode == WrOpcode::kFlush) {
    // A FLUSH names its range (or MR) and is answered with no data.
    packet::Headers h = request_headers(w, Opcode::kRcFlush, psn);
    h.feth.placement_type = w.flush_placement;
    h.feth.selectivity_level = w.flush_selectivity;
    h.reth.va = w.remote_addr;
    h.reth.rkey = w.rkey;
    h.reth.dma_len = w.flush_length;
    h.bth.ack_req = true;
    return h;
  }
  packet::Headers h = request_headers(w, Opcode::kRcReadRequest, psn);
  h.bth.ack_req = true;
  h.reth.va = w.remote_addr + offset;
  h.reth.rkey = w.rkey;
  h.reth.dma_len = static_cast<uint32_t>(w.length - offset);
  return h;
}

Requester::Step Requester::send_read_request() {
  // One request carries the whole read (or, after a rewind, the part not
  // yet received); the responder answers with packets_of() packets.
  const SendWqe& w = *wqe_;
  const packet::Headers h = read_request_headers(w, npsn_, send_offset_);
  qp_.transmit(h, {});
  wqe_->read_stream_end = w.last_psn;
  ack_request_next_ = false;  // a READ request always asks
  advance_psn(packet::psn_add(w.last_psn, 1));
  finish_wqe();
  qp_.completer.arm_retransmit_timer();
  return Step::kNextWqe;
}

packet::Headers Requester::segment_headers(const SendWqe& w, uint32_t psn, bool first,
                                           bool last) const {
  packet::Headers h = request_headers(w, message_opcode(qp_.type, w, first, last), psn);
  if (first && !w.is_send()) {
    h.reth.va = w.remote_addr;
    h.reth.rkey = w.rkey;
    h.reth.dma_len = static_cast<uint32_t>(w.length);
  }
  if (last) {
    h.imm_data = w.imm_data;
    // SEND with invalidate: the R_Key the responder frees (IETH).
    if (w.opcode == WrOpcode::kSendWithInv) h.ieth_rkey = w.rkey;
    h.bth.solicited = (w.flags & kWrSolicited) != 0;
  }
  return h;
}

Requester::Step Requester::send_segment() {
  // SEND / WRITE: one packet per path-MTU segment.
  SendWqe& w = *wqe_;
  const uint32_t m = qp_.mtu();
  const bool first = send_offset_ == 0;
  const uint64_t left = w.length - send_offset_;
  const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(left, m));
  const bool last = left <= m;
  packet::Headers h = segment_headers(w, npsn_, first, last);
  // Also the packet that fills a shrunken window asks: else the window
  // could stand full, waiting for the end of a message it does not hold.
  h.bth.ack_req = last || ack_request_next_ ||
                  packet::psn_diff(npsn_, w.first_psn) % kAckRequestInterval ==
                      kAckRequestInterval - 1 ||
                  packets_in_flight() + 1 >= window_.packets() ||
                  qp_.engine->acknowledges_each_packet();
  ack_request_next_ = false;
  if (qp_.type == QpType::kUc) h.bth.ack_req = false;  // UC is never acknowledged

  const uint64_t index = qp_.sq.next;
  if (w.inline_len) {
    qp_.transmit(h, std::span<const uint8_t>(qp_.sq.inline_at(index) + send_offset_, chunk));
  } else if (WcStatus st = qp_.transmit_gathered(h, qp_.sq.sges_at(index), w.num_sge,
                                                 send_offset_, chunk);
             st != WcStatus::kSuccess) {
    return local_error(w, st);
  }
  advance_psn(packet::psn_add(npsn_, 1));
  return segments_sent(w, chunk, last);
}

Requester::Step Requester::send_run() {
  SendWqe& w = *wqe_;
  const uint64_t m = qp_.mtu();
  const uint64_t left = w.length - send_offset_;
  const uint32_t packets_left = static_cast<uint32_t>((left + m - 1) / m);
  const uint32_t in_flight = packets_in_flight();
  const uint32_t packets = std::min(packets_left, window_.packets() - in_flight);
  const bool ends = packets == packets_left;
  RunFrame run;
  run.sender_pid = static_cast<uint32_t>(own_pid());
  run.packets = packets;
  run.bytes = ends ? left : packets * m;
  const bool first = send_offset_ == 0;
  run.first = segment_headers(w, npsn_, first, ends && packets == 1);
  run.last = packets == 1 ? run.first
                          : segment_headers(w, packet::psn_add(npsn_, packets - 1), false, ends);
  // The responder acknowledges the run's end, as it would its last packet.
  run.last.bth.ack_req = is_reliable(qp_.type);
  if (packets == 1) run.first = run.last;
  ack_request_next_ = false;
  // Placed: the whole message in this one run (SameHostRoute::placeable).
  run.placed = std::exchange(payload_placed_, false);
  if (!run.placed) {
    if (WcStatus st = qp_.describe(qp_.sq.sges_at(qp_.sq.next), w.num_sge, send_offset_,
                                   run.bytes, run);
        st != WcStatus::kSuccess)
      return local_error(w, st);
  }
  qp_.transmit_run(run);
  advance_psn(packet::psn_add(npsn_, packets));
  return segments_sent(w, run.bytes, ends);
}

Requester::Step Requester::send_datagram() {
  // UD: the whole message is one packet (post_send checked it fits the
  // MTU), and the WR is done once it is on the wire: nothing acknowledges it.
  SendWqe& w = *wqe_;
  packet::Headers h = qp_.make_datagram_headers(w, npsn_);
  if (w.length > qp_.mtu()) {
    // IBTA C10-93.1.1: a UD message longer than the MTU is not sent, and
    // that is no error: the WR completes successfully (as on rxe).
    ++qp_.counters.datagrams_above_mtu;
  } else if (w.ud.multicast) {
    // IBTA 10.5.2.3: to a group, DestQP 0xFFFFFF; one copy per member process.
    h.bth.dest_qp = Engine::kMulticastQpn;
    qp_.engine->multicast_routes(w.ud.av.is_global ? &w.ud.av.dgid : nullptr, w.ud.av.dlid,
                                 multicast_routes_);
    for (const MulticastRoute& route : multicast_routes_)
      if (WcStatus st = transmit_datagram(w, h, WireAddress{route.device_index, route.qpn});
          st != WcStatus::kSuccess)
        return local_error(w, st);
    // A RoCE group also has members on other hosts: one copy to the group's
    // IP address, which the network hands to each of them. Not from a
    // loopback address: that reaches no other host, and this host's
    // members have theirs already.
    const bool off_host = w.ud.av.is_global && packet::is_ip_multicast(w.ud.av.dgid) &&
                          qp_.hca->description().link_layer == LinkLayer::kEthernet &&
                          !packet::is_ip_loopback(h.grh.sgid);
    if (off_host) {
      if (WcStatus st = transmit_datagram(w, h, WireAddress{WireAddress::kOffHost,
                                                            Engine::kMulticastQpn});
          st != WcStatus::kSuccess)
        return local_error(w, st);
    } else if (multicast_routes_.empty()) {
      ++qp_.counters.datagrams_to_empty_groups;  // the fabric has nobody to give it to
    }
  } else if (w.ud.device_index == Ah::kNoDevice) {
    ++qp_.counters.datagrams_unroutable;  // lost on the fabric
  } else if (WcStatus st = transmit_datagram(w, h, WireAddress{w.ud.device_index, w.ud.qpn});
             st != WcStatus::kSuccess) {
    return local_error(w, st);
  }
  advance_psn(packet::psn_add(npsn_, 1));
  finish_wqe();
  qp_.completer.sent_unacknowledged(npsn_);
  qp_.completer.complete(w, WcStatus::kSuccess);
  qp_.completer.retire_completed();
  return Step::kNextWqe;
}

Requester::Step Requester::local_operation() {
  // It takes effect once every WR before it has gone out (those wanting a
  // READ or atomic finished first ask for a fence), and completes in order.
  SendWqe& w = *wqe_;
  w.started = true;
  started_end_ = std::max(started_end_, qp_.sq.next + 1);
  const WcStatus status = w.opcode == WrOpcode::kBindMw ? qp_.bind_window(w)
                          : qp_.invalidate_window(w.rkey, /*remote=*/false)
                              ? WcStatus::kSuccess
                              : WcStatus::kMwBindErr;
  finish_wqe();
  qp_.completer.complete(w, status);
  qp_.completer.retire_completed();
  if (status == WcStatus::kSuccess) return Step::kNextWqe;
  // IBTA 10.7.3.1: a bind error is a local error: the QP fails.
  qp_.enter_error();
  qp_.raise(AsyncEventType::kQpFatal);
  return Step::kStop;
}

WcStatus Requester::transmit_datagram(const SendWqe& w, const packet::Headers& h,
                                      const WireAddress& to) {
  const uint64_t index = qp_.sq.next;
  if (w.inline_len) {
    qp_.transmit_to(to, h, std::span<const uint8_t>(qp_.sq.inline_at(index), w.inline_len));
    return WcStatus::kSuccess;
  }
  return qp_.transmit_gathered_to(to, h, qp_.sq.sges_at(index), w.num_sge, 0,
                                  static_cast<uint32_t>(w.length));
}

Requester::Step Requester::segments_sent(SendWqe& w, uint64_t bytes, bool last) {
  if (is_reliable(qp_.type)) qp_.completer.arm_retransmit_timer();
  if (!last) {
    send_offset_ += bytes;
    return Step::kCheckLimits;
  }
  finish_wqe();
  if (qp_.type == QpType::kUc) {
    // UC: the WR is done once its last packet is on the wire (IBTA 9.8.3).
    qp_.completer.sent_unacknowledged(npsn_);
    qp_.completer.complete(w, WcStatus::kSuccess);
    qp_.completer.retire_completed();
  }
  return Step::kNextWqe;
}

Requester::Step Requester::local_error(SendWqe& w, WcStatus status) {
  // IBTA 10.7.3.1: a local protection/length error completes the WR in
  // error; a reliable QP goes to ERR, a UC or UD QP's send queue to SQE.
  qp_.completer.complete(w, status);
  if (!is_reliable(qp_.type)) {
    qp_.enter_send_queue_error();
    return Step::kStop;
  }
  qp_.enter_error();
  qp_.raise(AsyncEventType::kQpFatal);
  return Step::kStop;
}

void Requester::finish_wqe() {
  send_offset_ = 0;
  ++qp_.sq.next;
}

void Requester::request_read_part(SendWqe& w, uint32_t psn, uint32_t packets) {
  const uint64_t offset = uint64_t(packet::psn_diff(psn, w.first_psn)) * qp_.mtu();
  packet::Headers h = read_request_headers(w, psn, offset);
  if (w.opcode == WrOpcode::kRdmaRead)
    h.reth.dma_len = static_cast<uint32_t>(
        std::min<uint64_t>(uint64_t(packets) * qp_.mtu(), w.length - offset));
  ++resend_rounds_;
  qp_.transmit(h, {});
  ++qp_.counters.retransmitted_packets;
  w.read_stream_end = packet::psn_add(psn, packets - 1);
  qp_.completer.arm_retransmit_timer();
}

packet::Headers Requester::request_headers(const SendWqe& w, Opcode opcode, uint32_t psn) const {
  packet::Headers h = qp_.make_headers(opcode, psn);
  // Every XRC request names the XRC SRQ at the target (IBTA 9.3.1).
  if (qp_.type == QpType::kXrcSend) h.xrc_srqn = w.xrc_remote_srqn & packet::kPsnMask;
  return h;
}

void Requester::advance_psn(uint32_t to) {
  npsn_ = to;
  if (packet::psn_diff(npsn_, psn_high_) > 0) psn_high_ = npsn_;
}

void Requester::rewind_to(uint32_t psn) {
  // Go back N (IBTA 9.7.5.1.3): resend from the oldest WQE not yet done that
  // ends at or after `psn`, from `psn` within it (a READ from its first
  // missing response, an atomic whole).
  trace::go_back(qp_, psn);
  ++resend_rounds_;
  SendQueue& sq = qp_.sq;
  for (uint64_t n = sq.head; n != sq.tail; ++n) {
    SendWqe& w = sq.at(n);
    if (!w.started || w.done) continue;
    if (packet::psn_diff(w.last_psn, psn) < 0) continue;
    uint32_t from = packet::psn_diff(psn, w.first_psn) > 0 ? psn : w.first_psn;
    if (w.is_read() && packet::psn_diff(w.next_response_psn, from) > 0)
      from = w.next_response_psn;  // responses before it arrived already
    if (w.is_atomic()) from = w.first_psn;
    for (uint64_t k = n + 1; k != sq.tail; ++k) {
      SendWqe& later = sq.at(k);
      if (!later.started || later.done) continue;
      if (later.is_rd_atomic()) rd_atomic_finished();
      later.started = false;
    }
    sq.next = n;
    send_offset_ = static_cast<uint64_t>(packet::psn_diff(from, w.first_psn)) * qp_.mtu();
    npsn_ = from;
    ack_request_next_ = true;
    return;
  }
}

}  // namespace softverbs
