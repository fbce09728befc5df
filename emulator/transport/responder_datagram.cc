// The responder's UD path (IBTA 9.8.2, 11.4.1.1): a datagram is one packet,
// checked by Q_Key only, placed whole into the next receive WQE behind the
// 40 bytes kept for a GRH, and never acknowledged. What cannot be received
// is dropped and counted, as a fabric would lose it.
#include <array>

#include "emulator/objects/qp_impl.h"
#include "emulator/trace/protocol_events.h"
#include "emulator/transport/responder.h"

namespace softverbs {

void Responder::receive_datagram(const packet::DecodedPacket& pkt) {
  const packet::Headers& h = pkt.headers;
  if (h.deth.qkey != qp_.attr.qkey) {
    ++qp_.counters.qkey_violations;  // IBTA 10.2.5: silently dropped
    return;
  }
  if (!claim_receive()) {
    ++qp_.counters.datagrams_dropped_no_receive;
    return;
  }
  const uint64_t length = packet::kGrhBytes + pkt.payload.size();
  if (length > recv_wqe_.length) {
    if (!qp_.srq) {
      // The WQE stays posted for the next datagram (as rxe does).
      holds_receive_ = false;
      ++qp_.counters.datagrams_dropped_too_long;
      return;
    }
    fail_receive(WcStatus::kLocLenErr);  // taken from the SRQ: it completes
    return;
  }
  WcStatus st = WcStatus::kSuccess;
  if (h.has_grh) {
    std::array<uint8_t, packet::kGrhBytes> grh;
    packet::encode_grh(h.grh, grh);
    st = qp_.scatter(recv_wqe_.sges, recv_wqe_.num_sge, 0, grh);
  }
  if (st == WcStatus::kSuccess)
    st = qp_.scatter(recv_wqe_.sges, recv_wqe_.num_sge, packet::kGrhBytes, pkt.payload);
  if (st != WcStatus::kSuccess) {
    // A receive buffer the QP may not write: a local error of this QP.
    fail_receive(st);
    qp_.raise(AsyncEventType::kQpFatal);
    qp_.enter_error();
    return;
  }
  Completion c;
  c.wr_id = recv_wqe_.wr_id;
  c.opcode = WcOpcode::kRecv;
  c.byte_len = static_cast<uint32_t>(length);  // the GRH area counts, present or not
  c.qp_num = qp_.qpn;
  c.src_qp = h.deth.src_qp;
  c.slid = h.lrh.slid;
  c.sl = h.lrh.sl;
  if (h.bth.opcode == packet::Opcode::kUdSendOnlyImm) {
    c.imm_data = h.imm_data;
    c.wc_flags |= kWcWithImm;
  }
  if (h.has_grh) c.wc_flags |= kWcGrh;
  retire_receive();
  trace::receive_completed(qp_, WcStatus::kSuccess);
  qp_.recv_cq->impl().push(c, h.bth.solicited);
}

}  // namespace softverbs
