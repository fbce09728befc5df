// The requester: turns send WQEs into request packets (IBTA 9.7.1). Each
// WQE takes a contiguous run of PSNs: one per path-MTU segment for SEND and
// WRITE, one per expected response packet for READ, one for an atomic. It
// owns where transmission stands; the completer moves it back (go back N).
//
// Driven as a state machine, one function per step (requester.cc):
//   NextWqe -> CheckLimits -> StartWqe -> (ExecuteDirect -> NextWqe) |
//   StartPackets -> SendAtomic | SendReadRequest | SendSegment | SendRun ->
//   (NextWqe | CheckLimits | Stop)
// StartWqe asks the QP's same-host route (same_host_route.h) whether a WQE
// is executed on the target directly, waits for ACKs first, or goes as
// packets; StartPackets asks it whether the rest goes as one run.
// Guarded by the QP's lock.
#pragma once

#include <cstdint>
#include <vector>

#include "emulator/engine/multicast_directory.h"
#include "emulator/packet/headers.h"
#include "emulator/same_host/same_host_route.h"
#include "emulator/transport/congestion_window.h"
#include "emulator/transport/send_queue.h"
#include "emulator/wire/wire.h"

namespace softverbs {

struct QpImpl;

class Requester {
 public:
  explicit Requester(QpImpl& qp) : qp_(qp) {}

  // Transmits what the window, the read/atomic limit, fences and the RNR wait
  // allow.
  void run();
  // Go back N (IBTA 9.7.5.1.3): transmission resumes at `psn`, in the oldest
  // WQE not done that holds it or lies after it.
  void rewind_to(uint32_t psn);
  // Asks again for `packets` responses of READ `w` from `psn` on, without
  // moving where transmission stands: one READ request for that part.
  void request_read_part(SendWqe& w, uint32_t psn, uint32_t packets);
  // RTR -> RTS: the first PSN to send.
  void start(uint32_t sq_psn);
  void reset();
  // RTS -> SQD (IBTA 10.3.1.4): the messages whose transmission has begun
  // are carried to completion (retransmissions and RNR retries included);
  // the WQEs behind them wait for SQD -> RTS.
  void begin_drain() { drain_end_ = started_end_; }
  // In SQD: every message begun before SQD was entered has completed.
  bool drained() const;

  uint32_t next_psn() const { return npsn_; }
  // How many times requests were sent again: went back N (rewind_to), or
  // asked again for missing parts of a READ (request_read_part). A request's
  // attempt for fault decisions (frame_identity.h): the same after a NAK
  // however far the requester had gone past the lost packet before it came,
  // and another for each request sent again, so a request a rule dropped
  // once is not dropped again for being the same.
  uint32_t resend_rounds() const { return resend_rounds_; }
  // One past the highest PSN ever sent (next_psn() is lower after a go
  // back N, until the resending catches up).
  uint32_t sent_end() const { return psn_high_; }
  // A READ or atomic WQE finished (done, failed or flushed): one less
  // outstanding against max_rd_atomic.
  void rd_atomic_finished() {
    if (rd_atomic_outstanding_) --rd_atomic_outstanding_;
  }
  uint32_t rd_atomic_outstanding() const { return rd_atomic_outstanding_; }
  uint32_t packets_of(const SendWqe& w) const;
  // Unacknowledged packets let fly before waiting for ACKs: the
  // completer shrinks it on loss and grows it as ACKs come.
  CongestionWindow& window() { return window_; }
  const CongestionWindow& window() const { return window_; }

  // The transport's limit of unacknowledged packets, kept modest: go back
  // N resends up to this many after one loss.
  static constexpr uint32_t kMaxPacketsInFlight = 256;

 private:
  enum class Step { kNextWqe, kCheckLimits, kStartWqe, kExecuteDirect, kStartPackets,
                    kSendAtomic, kSendAtomicWrite, kSendReadRequest, kSendDatagram,
                    kLocalOperation, kSendSegment, kSendRun, kStop };

  Step next_wqe();
  Step check_limits();
  Step start_wqe();
  // A WRITE or READ executed on the target process itself by the same-host
  // route (same_host_route.h), else on to StartPackets.
  Step execute_direct();
  Step start_packets();
  Step send_atomic();
  Step send_atomic_write();
  Step send_read_request();
  Step send_segment();
  // SEND/WRITE segments from send_offset_ on, as one run (run_frame.h).
  Step send_run();
  Step send_datagram();
  // A bind or an invalidation: done here, in the send queue's order.
  Step local_operation();
  WcStatus transmit_datagram(const SendWqe& w, const packet::Headers& h, const WireAddress& to);
  packet::Headers segment_headers(const SendWqe& w, uint32_t psn, bool first, bool last) const;
  // The headers of any request packet of `w`: an XRC initiator's name the
  // target's XRC SRQ.
  packet::Headers request_headers(const SendWqe& w, packet::Opcode opcode, uint32_t psn) const;
  // The request a READ-like WQE (a READ from `offset` on, or a FLUSH) sends.
  packet::Headers read_request_headers(const SendWqe& w, uint32_t psn, uint64_t offset) const;
  // A segment (or a run) went out: the offset moves, the WQE may be done.
  Step segments_sent(SendWqe& w, uint64_t bytes, bool last);
  // A local protection or length error while reading the WQE's buffers.
  Step local_error(SendWqe& w, WcStatus status);
  // The WQE's last packet went out: on to the next one.
  void finish_wqe();
  void advance_psn(uint32_t to);
  // Packets sent and not yet acknowledged: what the send window limits.
  uint32_t packets_in_flight() const;

  QpImpl& qp_;
  SendWqe* wqe_ = nullptr;      // the WQE the current run is on
  uint32_t npsn_ = 0;           // next PSN to send
  uint32_t psn_high_ = 0;       // one past the highest PSN ever sent
  uint32_t resend_rounds_ = 0;
  uint64_t send_offset_ = 0;    // bytes of the current WQE already sent
  // The first packet after a go-back-N asks for an ACK, so the responder
  // says at once where it stands even if it only sees duplicates.
  bool ack_request_next_ = false;
  std::vector<MulticastRoute> multicast_routes_;  // scratch of send_datagram
  uint32_t rd_atomic_outstanding_ = 0;
  // One past the furthest SQ index whose first packet ever went out. A go
  // back N clears `started` on the WQEs it rewinds over; this stays.
  // The WQE at hand is a WRITE with immediate whose bytes the same-host
  // route placed on the target: its one run frame carries no payload.
  bool payload_placed_ = false;
  uint64_t started_end_ = 0;
  uint64_t drain_end_ = 0;  // in SQD: the WQEs before it may still be sent
  CongestionWindow window_{kMaxPacketsInFlight};
  // How each WQE travels to a peer of this host, and what it learnt.
  SameHostRoute route_{qp_};
};

}  // namespace softverbs
