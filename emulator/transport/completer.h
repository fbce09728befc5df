// The completer: retires send WQEs as ACKs, NAKs, READ responses and atomic
// acknowledgements arrive (IBTA 9.7.5.1), and runs the local ACK timer and
// the RNR wait (IBTA 9.7.6.1.3, 9.7.5.2.8).
//
// Driven as a state machine per response, one function per step
// (completer.cc):
//   CheckPsn -> Acknowledge -> ReadResponse | AtomicAcknowledge | Ack |
//   RnrNak | Nak -> Done
// Guarded by the QP's lock.
#pragma once

#include <cstdint>
#include <optional>

#include "emulator/packet/codec.h"
#include "emulator/packet/headers.h"
#include "emulator/same_host/fair_timeout.h"
#include "emulator/transport/read_arrivals.h"
#include "emulator/transport/send_queue.h"

namespace softverbs {

struct QpImpl;

class Completer {
 public:
  explicit Completer(QpImpl& qp) : qp_(qp) {}

  void on_response(const packet::DecodedPacket& pkt, const packet::OpcodeInfo& info);
  // Called when a deadline this QP scheduled has come (or a stale one).
  void on_timer(uint64_t now_ns);

  // RTR -> RTS: nothing is outstanding before `sq_psn`.
  void start(uint32_t sq_psn);
  void reset();
  void stop_timers() { retransmit_deadline_ns_ = rnr_deadline_ns_ = 0; }

  // A packet that must be acknowledged is on the wire.
  void arm_retransmit_timer();
  // Go back N to the oldest unacknowledged PSN now (the path changed).
  void resend_outstanding();
  bool waiting_for_rnr() const { return rnr_deadline_ns_ != 0; }

  // The requester executed `w` (at SQ index `index`) on the target
  // directly (direct_execution.h): done, acknowledged up to the next PSN,
  // reported; an atomic's `original` value scattered into its buffer.
  void executed_directly(SendWqe& w, uint64_t index, uint64_t original);
  // Marks a WQE done with `status`; retire_completed() reports it.
  void complete(SendWqe& w, WcStatus status);
  // Reports done WQEs from the head of the send queue, in order.
  void retire_completed();
  // The oldest incomplete WR fails with `status`, and the QP enters ERR.
  void fail_oldest(WcStatus status);

  // What stats show.
  uint32_t unacked_psn() const { return una_psn_; }
  uint8_t retries_left() const { return retries_left_; }
  bool retransmit_armed() const { return retransmit_deadline_ns_ != 0; }
  bool timer_armed() const { return retransmit_deadline_ns_ || rnr_deadline_ns_; }
  // UC: a WR is done once sent.
  void sent_unacknowledged(uint32_t next_psn) { una_psn_ = next_psn; }

 private:
  enum class Step { kCheckPsn, kAcknowledge, kReadResponse, kAtomicAcknowledge, kAck,
                    kRnrNak, kNak, kDone };
  struct Response {
    const packet::DecodedPacket& pkt;
    const packet::OpcodeInfo& info;
    uint32_t psn;
  };

  Step check_psn(Response& r);
  Step acknowledge(Response& r);
  Step read_response(Response& r);
  Step atomic_acknowledge(Response& r);
  // Scatters an atomic's answer into the buffer of the WQE at `index`.
  WcStatus scatter_original(uint64_t index, uint64_t original);
  Step ack(Response& r);
  Step rnr_nak(Response& r);
  Step nak(Response& r);

  // Everything before `psn` is acknowledged: retires the SEND/WRITE WQEs
  // that end before it. Returns the PSN acknowledgement really reached, and
  // whether a READ or atomic was passed over (an implied NAK).
  struct Acknowledgement {
    uint32_t acked;
    bool implied_nak;
  };
  Acknowledgement acknowledge_before(uint32_t psn);
  void advance_una(uint32_t psn);
  // The local ACK timer expired with requests outstanding (IBTA 9.7.6.1.3).
  void local_ack_timeout(uint64_t now_ns);
  // IBTA 9.7.6.1.3: the local ACK timeout is 4.096 us * 2^timeout.
  uint64_t local_ack_timeout_ns() const;
  bool take_acknowledgement(uint32_t psn);
  void resend_from(uint32_t psn);
  // Takes one retry of retry_cnt; true when none is left and the QP could
  // not migrate to its alternate path instead.
  bool retries_exhausted();
  // Asks again for the responses READ `w` lacks, gap by gap.
  void request_missing_responses(SendWqe& w, bool stream_ended);
  // A READ finished: applies the acknowledgement that passed over it.
  void apply_deferred_acknowledgement();
  void fail_at(uint32_t psn, WcStatus status);
  void fail_wqe(SendWqe& w, WcStatus status);
  void schedule(uint64_t deadline_ns);

  QpImpl& qp_;
  uint32_t una_psn_ = 0;  // oldest PSN not acknowledged
  uint8_t retries_left_ = 0;
  uint8_t rnr_retries_left_ = 0;
  bool resend_pending_ = false;  // went back to resend_psn_; no progress since
  uint32_t resend_psn_ = 0;
  ReadArrivals read_arrivals_;  // the oldest READ's responses past its first gap
  // The furthest acknowledgement a READ or atomic still missing responses
  // held back (take_acknowledgement's argument).
  std::optional<uint32_t> deferred_ack_psn_;
  uint64_t retransmit_deadline_ns_ = 0;  // 0: not armed
  uint64_t rnr_deadline_ns_ = 0;         // 0: not waiting
  uint64_t queued_deadline_ns_ = 0;      // the soonest entry in the timer queue, 0: none
  FairTimeout fair_timeout_;             // a peer of this host that has not run is waited for
};

}  // namespace softverbs
