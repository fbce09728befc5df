// How the WQEs of one QP travel to a peer of this host. The requester asks
// once per WQE, before anything of it is sent, and again only if the answer
// was to wait; this object keeps what it learnt from earlier answers (does
// direct execution work on this peer, does this R_Key need a system call,
// is the application streaming), so the requester's machine holds only the
// transport's own state. The ways (same_host.h):
//
//   WRITE/READ up to 4 MiB, nothing outstanding -> executed directly
//   atomic on a word mapped here, nothing
//   outstanding                                  -> executed directly
//   WRITE with immediate into pages mapped here,
//   nothing outstanding                          -> its bytes placed directly,
//                                                   then a run frame without
//                                                   payload for the target
//   SEND of one packet, nothing outstanding      -> placed on the target
//                                                   (placed_send.h)
//   short WRITE/READ behind packets              -> packets
//   longer WRITE/READ behind other WRITE/READs   -> wait for their ACKs, then
//                                                   executed directly
//   anything else                                -> packets; 16 KiB or more
//                                                   of a SEND or WRITE as runs
//
// Guarded by the QP's lock, like the requester that owns it.
#pragma once

#include <cstdint>

#include "emulator/packet/headers.h"
#include "emulator/same_host/placed_send.h"
#include "emulator/wire/same_host_peers.h"
#include "emulator/transport/send_queue.h"

namespace softverbs {

struct QpImpl;
struct RunFrame;

class SameHostRoute {
 public:
  explicit SameHostRoute(QpImpl& qp) : qp_(qp) {}

  enum class Travel {
    kPackets,    // the packet path (segments or runs: as_run())
    kDirect,     // execute() it now
    kAfterAcks,  // ask again once what is outstanding is acknowledged
  };
  // For WQE `w` whose transmission has not begun; `quiet`: nothing of
  // this QP is outstanding (no packet unacknowledged, no READ or atomic
  // unanswered), so the target's responder has taken every earlier request.
  Travel choose(const SendWqe& w, bool quiet);

  // Executes WRITE, READ or atomic `w` (at SQ index `index`, first PSN
  // `psn`) on the target process directly; a compare-and-swap or
  // fetch-and-add leaves the word's former value in `original`; of a
  // WRITE with immediate, places the bytes only (the requester sends its
  // run frame, `placed`, and the target completes it). false:
  // nothing happened, it goes as packets (where the responder gives the
  // exact answer a failure deserves).
  bool execute(const SendWqe& w, uint64_t index, uint32_t psn, uint64_t& original);

  // Places SEND `w` (at SQ index `index`; `h` its packet's headers) on the
  // target (placed_send.h). false: nothing happened, it goes as packets.
  bool place_send(const SendWqe& w, uint64_t index, const packet::Headers& h);

  // Whether the rest of SEND or WRITE `w`, `sent` bytes of it already
  // out, goes as one run, with `in_flight` packets unacknowledged of a
  // window of `window`.
  bool as_run(const SendWqe& w, uint64_t sent, uint32_t in_flight, uint32_t window) const;

  // The QP was reset: direct execution is worth trying again at once.
  void reset();

 private:
  // Where the bytes of WRITE or READ `w` lie in this process; false when
  // its SGEs do not check out (the packets report it).
  bool describe_local(const SendWqe& w, uint64_t index, RunFrame& local) const;
  // A WRITE with immediate whose bytes this side may place itself, its
  // run frame standing for the rest (run_frame.h, `placed`).
  bool placeable(const SendWqe& w) const;
  // Whether direct execution may be asked for `w` at all.
  bool direct_fits(const SendWqe& w) const;
  // Whether SEND `w` may be placed (counts down a pause after a target
  // that took none).
  bool placeable_send(const SendWqe& w);
  // place_send() but for what the receives view learns of a refusal.
  bool try_placing(const SendWqe& w, uint64_t index, const packet::Headers& h);
  // SEND `w`'s packet after room for its placed prefix in `frame`, its
  // payload gathered straight into place, and the checksum of the packet:
  // the frame's used part, empty when it does not fit or its SGEs do not
  // check out (the packets report them).
  std::span<uint8_t> encode_placed(const SendWqe& w, uint64_t index, const packet::Headers& h,
                                   std::span<uint8_t> frame, uint32_t& checksum) const;
  // A target that takes no placed SENDs: the next ones go as packets
  // without asking, their number doubling with each refusal up to a limit.
  void placed_declined();
  // Direct execution did not happen: a later try, spaced out.
  void direct_declined();
  // Every WQE sent and not done is a WRITE or READ.
  bool only_one_sided_outstanding() const;
  // Whether `w`, which may be executed directly only without a system
  // call, keeps to packets because its R_Key needed one lately; counts it.
  bool keeps_to_packets(const SendWqe& w);
  // A WQE to `rkey` that had to do without a system call needed one (or
  // was executed directly).
  void rkey_needed_call(uint32_t rkey);
  void rkey_worked(uint32_t rkey);
  // Counts a WQE started: true when the application posts ahead without
  // polling the send CQ in between (same_host_route.cc, kStreamStarts).
  bool streaming();
  // The target QP lives in this process: a direct copy is a memcpy there,
  // cheaper than packets at any size and pace.
  bool target_in_this_process();

  QpImpl& qp_;
  // While direct execution works, a WRITE or READ posted behind packets
  // in flight waits for them to be acknowledged and is then executed
  // directly, so a stream of them does not stay on packets for good. While
  // it does not, every `direct_probe_interval_`-th such WQE waits and tries
  // again (the interval doubles up to a limit with each failure).
  bool direct_working_ = true;
  uint32_t direct_probe_in_ = 0;
  uint32_t direct_probe_interval_ = 0;
  // The WQE at hand is short and may be executed directly only if its
  // bytes move without a system call (kDirectAlwaysBytes).
  bool direct_without_call_only_ = false;
  // An R_Key whose MR only a system call reached when last asked (0: none;
  // no MR has R_Key 0): the next `rkey_packets_left_` of its WQEs that
  // must do without one go as packets without asking, then it is asked
  // again, the count doubling with each refusal up to a limit. A refusal
  // may pass (the target's pages not mapped yet, its process not yet
  // known alive), so it must not hold that MR's atomics to packets for
  // the QP's life.
  uint32_t rkey_needing_call_ = 0;
  uint32_t rkey_packets_left_ = 0;
  uint32_t rkey_recheck_interval_ = 0;
  // The target's receive counts as last read (placed_send.h), and its
  // target area while placing works.
  ReceivesView receives_view_;
  PeerTargetArea placed_target_;
  uint32_t placed_pause_ = 0;           // SENDs left to go as packets unasked
  uint32_t placed_pause_interval_ = 0;  // the last pause's length (0: none)
  uint64_t polls_seen_ = 0;         // the send CQ's poll count at the last look
  uint32_t starts_since_poll_ = 0;  // short one-sided WQEs started since it changed
};

}  // namespace softverbs
