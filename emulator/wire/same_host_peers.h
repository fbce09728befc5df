// What a wire between processes of one host offers besides frames: the
// target areas in which processes publish their QPs and MRs for initiators
// to execute on (emulator/same_host/direct_execution.h), whether a process
// takes runs (emulator/same_host/run_frame.h), and how far a process has
// served what was sent to it (emulator/same_host/fair_timeout.h). Only the engine's
// same-host door (emulator/same_host/same_host.h) uses it; wrappers of a
// wire (the fault injector, the routed wire) carry frames only and need
// not know it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "emulator/wire/wire.h"

namespace softverbs {

// A peer process's target area (emulator/same_host/target_table_layout.h):
// shared memory in which it publishes what an initiator needs to execute a
// one-sided operation on it directly. `keep` holds the mapping for as long
// as the caller uses `bytes`.
struct PeerTargetArea {
  std::shared_ptr<const void> keep;
  std::span<uint8_t> bytes;
  // The peer serves packets now without being woken: its progress thread
  // is awake or an application thread of it polls.
  bool attentive = false;
  // The peer is this very process: its memory is ours to copy, no system
  // call needed.
  bool same_process = false;
};

// How far a process's intake has got: frames put in its ring by anyone,
// and frames it has taken and served to the end of a pass of intake (its
// answers sent). Read from memory any process of the user can write:
// `capacity`, the most frames a ring holds, bounds what makes sense.
struct IntakeBacklog {
  uint64_t claimed = 0;
  uint64_t served = 0;
  uint64_t capacity = 0;
};

class SameHostPeers {
 public:
  virtual ~SameHostPeers() = default;

  // Runs name payload in the sender's memory, so only a process of this
  // host that says it accepts them takes them. set_accepting_runs() says
  // so for this process.
  virtual bool accepts_runs(const WireAddress& dst) = 0;
  virtual void set_accepting_runs(bool accepting) = 0;

  // The target area of this process, and that of the process serving
  // `dst` (empty: no such peer on this host). Without `attention`, its
  // `attentive` is left false (reading it costs a look at lines the peer
  // writes on every poll).
  enum class Attention { kAsk, kSkip };
  virtual std::span<uint8_t> own_target_area() = 0;
  virtual PeerTargetArea peer_target_area(const WireAddress& dst,
                                          Attention attention = Attention::kAsk) = 0;

  // Pushes `frame` for `dst` into the ring of the process whose target
  // area `target` is, now: false (nothing sent) when that process no
  // longer serves `dst`, frames of ours for it are held, or its ring is
  // full. Never holds the frame. (A SEND placed under that area's QP
  // entry lock: emulator/same_host/placed_send.h.)
  virtual bool push_now(const WireAddress& dst, const PeerTargetArea& target,
                        std::span<const uint8_t> frame) = 0;

  // The backlog of the live process serving `dst` (this one included);
  // nullopt when no live process of this host serves it.
  virtual std::optional<IntakeBacklog> intake_backlog(const WireAddress& dst) = 0;
  // A pass of this process's intake ended: what it took is served.
  virtual void intake_pass_ended() = 0;
  // Every slot of this process's ring that producers claimed has been
  // taken (consumer side, with the intake held).
  virtual bool own_ring_drained() = 0;
  // Frames of this process's ring lost to shared state a process broke
  // (ring protocol violations), as a count that only grows.
  virtual uint64_t ring_damage() const = 0;
};

}  // namespace softverbs
