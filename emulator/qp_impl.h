// A queue pair's state, shared by its three roles:
//   requester.cc  turns send WQEs into request packets (PSNs, segmentation)
//   responder.cc  checks and executes incoming requests, sends ACK/NAK and
//                 read responses
//   completer.cc  retires send WQEs on ACKs, NAKs and read responses, and
//                 runs the retransmit and RNR timers
// Guarded by the engine lock.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "emulator/cq_impl.h"
#include "emulator/hca_impl.h"
#include "emulator/packet/codec.h"
#include "emulator/qp_counters.h"

namespace softverbs {

struct SendWqe {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  uint32_t flags = 0;
  uint32_t imm_data = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  uint32_t num_sge = 0;
  uint32_t inline_len = 0;
  uint64_t length = 0;
  uint32_t first_psn = 0;   // assigned when first transmitted
  uint32_t last_psn = 0;
  uint32_t next_response_psn = 0;  // READ: the response PSN expected next
  bool started = false;
  bool done = false;
  WcStatus status = WcStatus::kSuccess;
};

struct RecvWqe {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  uint64_t length = 0;
};

// The IBTA's RNR NAK timer field (IBTA 9.7.5.2.8): code -> microseconds.
uint32_t rnr_timer_us(uint8_t code);

struct QpImpl {
  // Identity and wiring.
  Hca* hca = nullptr;
  Engine* engine = nullptr;
  Pd* pd = nullptr;
  Qp* self = nullptr;
  QpType type = QpType::kRc;
  uint32_t device_index = 0;
  uint32_t qpn = 0;
  Cq* send_cq = nullptr;
  Cq* recv_cq = nullptr;
  bool sq_sig_all = false;
  QpCapabilities cap;
  QpAttributes attr;  // attr.state is the current state

  // Where the peer lives (resolved at RTR from the address vector).
  bool peer_routable = false;
  uint32_t peer_device_index = 0;

  // Send queue: a ring of max_send_wr WQEs; SGEs and inline bytes in pools.
  std::vector<SendWqe> sq;
  std::vector<Sge> sq_sges;
  std::vector<uint8_t> sq_inline;
  uint64_t sq_head = 0;   // oldest not yet completed
  uint64_t sq_next = 0;   // next to (re)transmit
  uint64_t sq_tail = 0;   // next free
  uint64_t send_offset = 0;  // bytes of sq[sq_next] already sent
  uint32_t npsn = 0;      // next PSN to send
  uint32_t una_psn = 0;   // oldest PSN not acknowledged
  uint32_t psn_high = 0;  // one past the highest PSN ever sent
  // The first packet after a go-back-N asks for an ACK, so the responder
  // says at once where it stands even if it only sees duplicates.
  bool ack_request_next = false;
  uint32_t reads_outstanding = 0;

  // Receive queue.
  std::vector<RecvWqe> rq;
  std::vector<Sge> rq_sges;
  uint64_t rq_head = 0;
  uint64_t rq_tail = 0;

  // Responder.
  uint32_t epsn = 0;       // expected PSN
  uint32_t msn = 0;        // message sequence number
  bool nak_sent = false;   // one sequence NAK per gap (IBTA 9.7.5.1.2)
  bool recv_in_progress = false;  // a multi-packet SEND is being received
  uint64_t recv_offset = 0;
  bool write_in_progress = false;
  uint64_t write_va = 0;
  uint64_t write_remaining = 0;
  uint32_t write_rkey = 0;
  uint64_t write_length = 0;  // the RETH's DMA length of the current WRITE
  bool comm_established = false;
  bool uc_dropping = false;  // UC: a packet was lost; skip to the next message
  // Results of executed atomics by PSN, so a duplicate is answered without
  // executing twice (IBTA 9.7.5.3.2). max_dest_rd_atomic entries.
  struct AtomicResult {
    uint32_t psn = 0;
    uint64_t orig = 0;
    bool valid = false;
  };
  std::vector<AtomicResult> atomic_results;
  uint32_t next_atomic_slot = 0;

  QpCounters counters;

  // Completer timers.
  uint64_t retransmit_deadline_ns = 0;  // 0: not armed
  uint64_t rnr_deadline_ns = 0;         // 0: not waiting
  uint8_t retries_left = 0;
  bool resend_pending = false;  // went back to resend_psn; no progress since
  uint32_t resend_psn = 0;
  uint8_t rnr_retries_left = 0;
  bool sq_drained_notify = false;

  // Scratch for payload gathering (one MTU).
  std::vector<uint8_t> scratch;

  // ---- queue helpers
  uint32_t sq_capacity() const { return static_cast<uint32_t>(sq.size()); }
  SendWqe& sq_at(uint64_t n) { return sq[n % sq.size()]; }
  Sge* sq_sges_at(uint64_t n) { return &sq_sges[(n % sq.size()) * cap.max_send_sge]; }
  uint8_t* sq_inline_at(uint64_t n) {
    return sq_inline.data() + (n % sq.size()) * cap.max_inline_data;
  }
  RecvWqe& rq_at(uint64_t n) { return rq[n % rq.size()]; }
  Sge* rq_sges_at(uint64_t n) { return &rq_sges[(n % rq.size()) * cap.max_recv_sge]; }
  uint32_t mtu() const { return mtu_bytes(attr.path_mtu); }
  bool is_rd_atomic(const SendWqe& w) const {
    return w.opcode == WrOpcode::kRdmaRead || w.opcode == WrOpcode::kAtomicCmpSwp ||
           w.opcode == WrOpcode::kAtomicFetchAdd;
  }
  bool can_send() const {
    return attr.state == QpState::kRts || attr.state == QpState::kSqd;
  }
  bool can_receive() const {
    return attr.state == QpState::kRtr || attr.state == QpState::kRts ||
           attr.state == QpState::kSqd || attr.state == QpState::kSqe;
  }

  // ---- the QP's operations (qp.cc)
  Errno modify(const QpAttributes& a, uint32_t mask);
  Errno post_send(const SendRequest& wr);
  Errno post_recv(const RecvRequest& wr);
  void enter_error();        // to ERR: flush both queues
  void enter_send_queue_error();  // to SQE (UC): flush the send queue only
  void reset();              // to RESET: forget everything
  void raise(AsyncEventType type);

  // ---- requester (requester.cc)
  void requester_run();
  uint32_t packets_of(const SendWqe& w) const;
  void rewind_to(uint32_t psn);

  // ---- responder (responder.cc)
  void receive(const packet::DecodedPacket& pkt);
  void send_ack(uint32_t psn, uint8_t syndrome);
  void receive_uc(const packet::DecodedPacket& pkt, const packet::OpcodeInfo& info);
  // The receive WQE at the head completes: successfully with the message
  // just received, or in error (which also serves flushing).
  void complete_receive(const packet::Headers& h, bool is_send, bool has_imm);
  void fail_receive(WcStatus status);
  void execute_atomic(const packet::Headers& h, const packet::OpcodeInfo& info);

  // ---- completer (completer.cc)
  void on_response(const packet::DecodedPacket& pkt);
  void on_timer(uint64_t now_ns);
  bool timer_armed() const { return retransmit_deadline_ns || rnr_deadline_ns; }
  void arm_retransmit_timer();
  void complete_send(SendWqe& w, WcStatus status);
  void retire_completed();
  void fail_send(WcStatus status);  // the oldest incomplete WR fails
  void fail_send_at(uint32_t psn, WcStatus status);  // the WR holding `psn` fails
  void resend_from(uint32_t psn);

  // ---- memory access (memory_access.cc)
  // Copies between local SGEs and a flat buffer at `offset` into the SGE
  // list. Checks lkeys, PD, bounds and local write access. Returns
  // kSuccess or the local error status.
  WcStatus gather(const Sge* sges, uint32_t n, uint64_t offset,
                  std::span<uint8_t> out) const;
  WcStatus scatter(const Sge* sges, uint32_t n, uint64_t offset,
                   std::span<const uint8_t> in) const;
  // A remote access through an rkey: the MR exists, is in the QP's PD, grants
  // `access`, the QP allows it, and [va, va+len) lies inside it.
  bool remote_access_ok(uint32_t rkey, uint64_t va, uint64_t len, uint32_t access) const;

  // ---- packet helpers
  packet::Headers make_headers(packet::Opcode opcode, uint32_t psn) const;
  void transmit(const packet::Headers& h, std::span<const uint8_t> payload);
};

}  // namespace softverbs
