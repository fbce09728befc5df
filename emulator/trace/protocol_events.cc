// The transport's trace events (protocol_events.h).
#include "emulator/trace/protocol_events.h"

#include <string_view>

#include "emulator/objects/qp_impl.h"
#include "emulator/same_host/run_frame.h"
#include "emulator/trace/trace_line.h"
#include "emulator/transport/aeth.h"

namespace softverbs::trace {
namespace {

uint32_t relative(uint32_t psn, uint32_t first) { return (psn - first) & packet::kPsnMask; }

// The opcode table's name, or OPCODE=<n> for one softverbs does not know.
TraceLine& opcode_word(TraceLine& line, packet::Opcode opcode) {
  if (const char* name = packet::opcode_info(static_cast<uint8_t>(opcode)).name)
    return line.word(name);
  return line.setting("OPCODE", static_cast<uint8_t>(opcode));
}

bool is_request(packet::Opcode opcode) {
  return packet::opcode_info(static_cast<uint8_t>(opcode)).is_request;
}

// Requests sent are the requester's, responses received the completer's;
// requests received and responses sent, the responder's.
Stream side_of(packet::Opcode opcode, bool sent) {
  if (is_request(opcode)) return sent ? Stream::kRequester : Stream::kResponder;
  return sent ? Stream::kResponder : Stream::kCompleter;
}

// The requester's and the completer's PSNs are the send queue's.
uint32_t relative_psn(const QpImpl& qp, Stream side, uint32_t psn) {
  return relative(psn, side != Stream::kResponder
                           ? qp.first_sq_psn.load(std::memory_order_relaxed)
                           : qp.first_rq_psn.load(std::memory_order_relaxed));
}

// What an ACK-carrying response says, after its opcode and PSN; null for
// other packets.
const char* syndrome_text(const packet::Headers& h) {
  if (!(packet::opcode_info(static_cast<uint8_t>(h.bth.opcode)).headers & packet::kHdrAeth))
    return nullptr;
  switch (aeth::kind(h.aeth.syndrome)) {
    case aeth::Kind::kAck: return "ack";
    case aeth::Kind::kRnrNak: return "rnr-nak";
    case aeth::Kind::kReserved: return "reserved";
    case aeth::Kind::kNak: break;
  }
  switch (aeth::value(h.aeth.syndrome)) {
    case aeth::kNakPsnSequenceError: return "nak-sequence";
    case aeth::kNakInvalidRequest: return "nak-invalid-request";
    case aeth::kNakRemoteAccessError: return "nak-remote-access";
    case aeth::kNakRemoteOperationalError: return "nak-remote-operational";
    case aeth::kNakInvalidRdRequest: return "nak-invalid-rd-request";
    default: return "nak";
  }
}

// A reliable requester's lines wait until the completer knows whether the
// responder saw their packets (QpTrace::request_event); an unreliable
// requester never goes back, and nothing would ever settle its lines.
void requester_event(const QpImpl& qp, uint32_t psn, std::string_view line) {
  if (is_reliable(qp.type))
    qp.trace->request_event(psn, line);
  else
    qp.trace->event(Stream::kRequester, line);
}

void packet_event(const QpImpl& qp, const packet::Headers& h, bool sent) {
  const Stream side = side_of(h.bth.opcode, sent);
  // Past a gap it answered, the responder drops requests unseen; how many
  // come depends on the host's timing.
  if (side == Stream::kResponder && !sent && qp.responder.discards_unseen(h.bth.psn)) return;
  TraceLine line;
  opcode_word(line.word(sent ? "send" : "recv"), h.bth.opcode);
  // A datagram received carries its sender's PSN, which says nothing here.
  if (!sent && qp.type == QpType::kUd) return qp.trace->event(side, line.finished());
  line.number(relative_psn(qp, side, h.bth.psn));
  if (const char* syndrome = syndrome_text(h)) line.word(syndrome);
  if (side == Stream::kRequester)
    requester_event(qp, h.bth.psn, line.finished());
  else
    qp.trace->event(side, line.finished());
}

void run_event(const QpImpl& qp, const RunFrame& run, bool sent) {
  const Stream side = sent ? Stream::kRequester : Stream::kResponder;
  TraceLine line;
  opcode_word(line.word("run"), run.first.bth.opcode);
  line.number(relative_psn(qp, side, run.first.bth.psn)).joined('+', run.packets);
  if (sent)
    requester_event(qp, run.first.bth.psn, line.finished());
  else
    qp.trace->event(side, line.finished());
}

const char* opcode_name(WcOpcode opcode) {
  switch (opcode) {
    case WcOpcode::kSend: return "SEND";
    case WcOpcode::kRdmaWrite: return "WRITE";
    case WcOpcode::kRdmaRead: return "READ";
    case WcOpcode::kCompSwap: return "COMP_SWAP";
    case WcOpcode::kFetchAdd: return "FETCH_ADD";
    case WcOpcode::kBindMw: return "BIND_MW";
    case WcOpcode::kLocalInv: return "LOCAL_INV";
    case WcOpcode::kAtomicWrite: return "ATOMIC_WRITE";
    case WcOpcode::kFlush: return "FLUSH";
    case WcOpcode::kRecv: return "RECV";
    case WcOpcode::kRecvRdmaWithImm: return "RECV_RDMA_WITH_IMM";
  }
  return "?";
}

}  // namespace

const char* status_name(WcStatus status) {
  switch (status) {
    case WcStatus::kSuccess: return "SUCCESS";
    case WcStatus::kLocLenErr: return "LOC_LEN_ERR";
    case WcStatus::kLocQpOpErr: return "LOC_QP_OP_ERR";
    case WcStatus::kLocEecOpErr: return "LOC_EEC_OP_ERR";
    case WcStatus::kLocProtErr: return "LOC_PROT_ERR";
    case WcStatus::kWrFlushErr: return "WR_FLUSH_ERR";
    case WcStatus::kMwBindErr: return "MW_BIND_ERR";
    case WcStatus::kBadRespErr: return "BAD_RESP_ERR";
    case WcStatus::kLocAccessErr: return "LOC_ACCESS_ERR";
    case WcStatus::kRemInvReqErr: return "REM_INV_REQ_ERR";
    case WcStatus::kRemAccessErr: return "REM_ACCESS_ERR";
    case WcStatus::kRemOpErr: return "REM_OP_ERR";
    case WcStatus::kRetryExcErr: return "RETRY_EXC_ERR";
    case WcStatus::kRnrRetryExcErr: return "RNR_RETRY_EXC_ERR";
    case WcStatus::kLocRddViolErr: return "LOC_RDD_VIOL_ERR";
    case WcStatus::kRemInvRdReqErr: return "REM_INV_RD_REQ_ERR";
    case WcStatus::kRemAbortErr: return "REM_ABORT_ERR";
    case WcStatus::kInvEecnErr: return "INV_EECN_ERR";
    case WcStatus::kInvEecStateErr: return "INV_EEC_STATE_ERR";
    case WcStatus::kFatalErr: return "FATAL_ERR";
    case WcStatus::kRespTimeoutErr: return "RESP_TIMEOUT_ERR";
    case WcStatus::kGeneralErr: return "GENERAL_ERR";
  }
  return "?";
}

void packet_sent(const QpImpl& qp, const packet::Headers& h) {
  if (qp.trace) packet_event(qp, h, true);
}

void packet_received(const QpImpl& qp, const packet::Headers& h) {
  if (qp.trace) packet_event(qp, h, false);
}

void run_sent(const QpImpl& qp, const RunFrame& run) {
  if (qp.trace) run_event(qp, run, true);
}

void run_received(const QpImpl& qp, const RunFrame& run) {
  if (qp.trace) run_event(qp, run, false);
}

void executed_directly(const QpImpl& qp, uint32_t psn, WcOpcode opcode) {
  if (!qp.trace) return;
  TraceLine line;
  requester_event(qp, psn, line.word("direct").word(opcode_name(opcode)).finished());
}

void ack_timeout(const QpImpl& qp, uint32_t psn, uint32_t retries_left) {
  if (!qp.trace) return;
  TraceLine line;
  line.word("timeout").number(relative_psn(qp, Stream::kCompleter, psn));
  qp.trace->event(Stream::kCompleter, line.setting("retries-left", retries_left).finished());
}

void rnr_wait(const QpImpl& qp, uint32_t psn, uint32_t rnr_retries_left) {
  if (!qp.trace) return;
  TraceLine line;
  line.word("rnr-wait").number(relative_psn(qp, Stream::kCompleter, psn));
  qp.trace->event(Stream::kCompleter,
                  line.setting("rnr-retries-left", rnr_retries_left).finished());
}

void go_back(const QpImpl& qp, uint32_t psn) {
  if (!qp.trace) return;
  TraceLine line;
  line.word("go-back").number(relative_psn(qp, Stream::kCompleter, psn));
  qp.trace->event(Stream::kCompleter, line.finished());
  qp.trace->abandon_requests_after(psn);
}

void acknowledged(const QpImpl& qp, uint32_t una) {
  if (qp.trace) qp.trace->settle_requests_before(una);
}

void send_completed(const QpImpl& qp, WcOpcode opcode, WcStatus status) {
  if (!qp.trace) return;
  TraceLine line;
  line.word("complete").word(opcode_name(opcode)).word(status_name(status));
  qp.trace->event(Stream::kCompleter, line.finished());
}

void receive_completed(const QpImpl& qp, WcStatus status) {
  if (!qp.trace) return;
  TraceLine line;
  qp.trace->event(Stream::kResponder, line.word("complete").word(status_name(status)).finished());
}

void fault_applied(const QpImpl& qp, fault::Direction direction, const packet::Headers& h,
                   fault::Action action, uint32_t attempt) {
  if (!qp.trace) return;
  const bool sent = direction == fault::Direction::kTx;
  const Stream side = side_of(h.bth.opcode, sent);
  TraceLine line;
  line.word("fault").word(fault::to_string(action)).word(sent ? "tx" : "rx");
  opcode_word(line, h.bth.opcode);
  line.number(!sent && qp.type == QpType::kUd ? 0 : relative_psn(qp, side, h.bth.psn));
  line.number(attempt);
  if (side == Stream::kRequester)
    requester_event(qp, h.bth.psn, line.finished());
  else
    qp.trace->event(side, line.finished());
}

}  // namespace softverbs::trace
