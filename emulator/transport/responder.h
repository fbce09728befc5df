// The responder: classifies each request by PSN (IBTA 9.7.4.1.x), executes
// the expected ones, answers duplicates, NAKs the first out-of-sequence one,
// and acknowledges. UC requests go through the same steps with UC's rules:
// no ACK or NAK, a gap loses the message in progress (IBTA 9.8.3).
//
// Driven as a state machine per request, one function per step
// (responder.cc):
//   CheckPsn -> (Duplicate | OutOfSequence | Execute) ; Execute ->
//   ExecuteSend | ExecuteWrite | ExecuteRead | ExecuteAtomic -> Complete ->
//   Acknowledge -> Done ; any execute step -> Error (fatal NAK, QP to ERR)
// Guarded by the QP's lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "emulator/packet/codec.h"
#include "emulator/packet/headers.h"
#include "emulator/same_host/run_frame.h"
#include "emulator/transport/aeth.h"
#include "emulator/transport/receive_wqe.h"
#include "emulator/types.h"

namespace softverbs {

struct QpImpl;

class Responder {
 public:
  explicit Responder(QpImpl& qp) : qp_(qp) {}

  void receive(const packet::DecodedPacket& pkt, const packet::OpcodeInfo& info);
  // A run of SEND or WRITE packets (run_frame.h): the same steps, taken once
  // for the whole run, with the payload pulled from the sender.
  void receive_run(const RunFrame& run);
  // A SEND an initiator of this host placed (placed_send.h): it accepted
  // the SEND on the QP's target entry, PSN and MSN included, and a receive
  // WQE was free for it; into that WQE and completed, with no PSN check
  // and no answer. What cannot happen unless the entry was scribbled on
  // (no receive, one too short, SGEs that fail) fails the QP.
  void receive_placed(const packet::DecodedPacket& pkt, const packet::OpcodeInfo& info);
  // A UD datagram (responder_datagram.cc): Q_Key check, then into the next
  // receive WQE behind the 40 bytes kept for the GRH. No PSN, no ACK.
  void receive_datagram(const packet::DecodedPacket& pkt);
  // INIT -> RTR: the first PSN expected, and how many atomic results to keep.
  void start(uint32_t rq_psn, uint32_t max_dest_rd_atomic);
  // A WQE claimed from the SRQ goes back to it.
  void reset();
  // Before destruction: a WQE claimed from the SRQ goes back to it.
  void release_receive();
  // Attached to an SRQ whose WQEs carry up to `max_sge` SGEs.
  void use_srq(uint32_t max_sge) { srq_sges_.resize(max_sge); }
  // ERR: every posted receive WQE completes flushed (of an SRQ, only the
  // one this QP holds).
  void flush();
  // The next receive WQE (the one held, or the next one) completes in error.
  void fail_receive(WcStatus status);
  // XRC target: the SRQ it delivers into is being destroyed; forget it and
  // the WQE held from it (responder_xrc.cc).
  void leave_xrc_srq();

  uint32_t expected_psn() const { return epsn_; }

  // The ACK held over a batch of frames (ack_batch.h), if any, goes now.
  // Also called before the QP leaves the receiving states: the application
  // may already have seen the completions that ACK stands for, and act on
  // them (move the QP to ERR, as rdma_disconnect does) before the batch ends.
  void send_held_ack();

  // Where the responder stands. An initiator that executes on this QP
  // directly (direct_execution.h) moves it on in the QP's target entry,
  // which the responder adopts before its next step (qp_target_entry.cc).
  struct Position {
    uint32_t expected_psn;
    uint32_t msn;
  };
  Position position() const { return {epsn_, msn_}; }
  void adopt(Position p) {
    epsn_ = p.expected_psn;
    msn_ = p.msn;
  }
  // A request for `psn` would be dropped unseen: a sequence NAK was sent
  // for the gap before it, and the missing PSN has not come. Read by the
  // fault injector, without the QP's lock (frame_identity.h).
  bool discards_unseen(uint32_t psn) const;
  // A request has arrived (in RTR, COMM_EST was raised for it).
  bool communication_established() const { return comm_established_; }
  // No message is half taken and no gap is being answered: a whole request
  // may be executed by someone else next.
  bool idle() const {
    return !recv_in_progress_ && !write_in_progress_ && !nak_sent_ && !uc_dropping_;
  }

 private:
  enum class Step { kCheckPsn, kOutOfSequence, kDuplicate, kExecute, kExecuteSend,
                    kExecuteWrite, kExecuteRead, kExecuteAtomic, kExecuteAtomicWrite,
                    kExecuteFlush, kComplete, kAcknowledge, kUcGap, kPullFailed, kError,
                    kDone };
  // One packet, or a run of them: `h`/`info` are the first packet's (PSN,
  // RETH, AtomicETH), `end`/`end_info` the last one's (ImmDt, solicited,
  // AckReq, whether the message ends); the same for a single packet.
  struct Request {
    const packet::Headers& h;
    const packet::OpcodeInfo& info;
    const packet::Headers& end;
    const packet::OpcodeInfo& end_info;
    Payload payload;
    aeth::NakCode nak = aeth::kNakInvalidRequest;
    AsyncEventType event = AsyncEventType::kQpReqErr;
    int pull_error = 0;
  };

  void run(Request& r);

  Step check_psn(Request& r);
  Step out_of_sequence(Request& r);
  Step duplicate(Request& r);
  Step execute(Request& r);
  Step execute_send(Request& r);
  Step execute_write(Request& r);
  Step execute_read(Request& r);
  Step execute_atomic(Request& r);
  Step execute_atomic_write(Request& r);
  Step execute_flush(Request& r);
  // Whether a FLUSH may act on what it names (its MR's flush rights).
  bool flush_allowed(const packet::Headers& h) const;
  Step complete(Request& r);
  Step acknowledge(Request& r);
  Step uc_gap(Request& r);
  Step pull_failed(Request& r);
  Step error(Request& r);
  Step fail(Request& r, aeth::NakCode nak, AsyncEventType event);

  // A plain ACK of everything up to `psn`: held while a batch of frames is
  // served (ack_batch.h), else sent.
  void ack(uint32_t psn);
  // Any other answer: the held ACK goes first.
  void send_ack(uint32_t psn, uint8_t syndrome);
  void transmit_ack(uint32_t psn, uint8_t syndrome);
  void send_atomic_ack(uint32_t psn, uint64_t orig);
  void send_read_response(uint32_t psn, uint32_t rkey, uint64_t va, uint64_t len);
  void rnr_nak(uint32_t psn);
  bool forced_rnr() const;
  void complete_receive(const packet::Headers& h, bool is_send, bool has_imm, bool has_inv);
  // The receive WQE of the message in progress: claimed at its start (from
  // the RQ's head or the SRQ), given back to nobody, retired at completion.
  // false when none is posted.
  bool claim_receive();
  void retire_receive();
  void drop_uc_message();
  bool is_uc() const;
  // XRC target (responder_xrc.cc): takes receive WQEs, memory protection
  // and completions from the XRC SRQ a request names. false (nothing
  // changed) when no SRQ of the target's domain has that number.
  bool enter_xrc_srq(uint32_t srqn);

  QpImpl& qp_;
  uint32_t epsn_ = 0;            // expected PSN
  uint32_t msn_ = 0;             // message sequence number
  bool nak_sent_ = false;        // one sequence NAK per gap (IBTA 9.7.5.1.2)
  // nak_sent_ and the PSN it was sent for, for discards_unseen():
  // kGapAnswered | PSN, or 0.
  void set_nak_sent(bool sent);
  static constexpr uint64_t kGapAnswered = uint64_t{1} << 32;
  std::atomic<uint64_t> answered_gap_{0};
  bool recv_in_progress_ = false;  // a multi-packet SEND is being received
  uint64_t recv_offset_ = 0;
  bool write_in_progress_ = false;
  uint64_t write_va_ = 0;
  uint64_t write_remaining_ = 0;
  uint64_t write_length_ = 0;    // the RETH's DMA length of the current WRITE
  uint32_t write_rkey_ = 0;
  bool comm_established_ = false;
  bool holds_ack_ = false;       // an ACK of held_ack_psn_ waits for its batch to end
  uint32_t held_ack_psn_ = 0;
  uint32_t held_acks_ = 0;       // ACKs it stands for
  static constexpr uint32_t kAcksHeldAtMost = 16;
  bool holds_receive_ = false;   // recv_wqe_ is claimed
  ReceiveWqeRef recv_wqe_;
  std::vector<Sge> srq_sges_;    // SGEs of a WQE claimed from the SRQ
  bool uc_dropping_ = false;     // UC: a packet was lost; skip to the next message
  // Results of executed atomics by PSN, so a duplicate is answered without
  // executing twice (IBTA 9.7.5.3.2). max_dest_rd_atomic entries.
  struct AtomicResult {
    uint32_t psn = 0;
    uint64_t orig = 0;
    bool valid = false;
  };
  std::vector<AtomicResult> atomic_results_;
  uint32_t next_atomic_slot_ = 0;
};

}  // namespace softverbs
