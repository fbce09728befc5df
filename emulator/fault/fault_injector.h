// The fault injector: a Wire that wraps the real one and, following a fault
// plan (fault_plan.h), drops, duplicates, reorders, delays or corrupts the
// frames going through it. Whether a rule fires for a frame depends on the
// plan's seed, the process's salt and who the frame is (frame_identity.h),
// not on when it passes.
//
// Where faults happen: tx rules in send(), on frames this process sends,
// before the inner wire sees them; rx rules in poll(), on frames the inner
// wire received, before they reach `deliver`. Held frames (delay, reorder)
// go out from poll(), tx ones through the inner wire's send().
//
// Held frames are released by poll() once due. The injector does not
// touch the intake's doorbell: whoever sleeps between polls (the engine)
// is told each time the earliest release time changes (set_release_alarm)
// and arms a timer for it.
//
// Threads: send() and poll() come from the engine under its lock; set_plan(),
// plan() and fault_counters() from any thread (a control socket);
// has_deferred() as the Wire interface says. The injector's
// state sits behind its own small mutex, never held while calling the inner
// wire or `deliver` (delivery may send an ACK, which comes back to send()).
// With an empty plan and nothing held, send() and poll() go straight to the
// inner wire after one flag check: no lock, no allocation.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "emulator/engine/clock.h"
#include "emulator/fault/fault_plan.h"
#include "emulator/fault/frame_observer.h"
#include "emulator/fault/frame_identity.h"
#include "emulator/fault/random.h"
#include "emulator/packet/codec.h"
#include "emulator/wire/wire.h"

namespace softverbs::fault {

// Injected faults, counted per frame.
struct FaultCounts {
  uint64_t matched = 0;     // frames some rule's dir/qp/op filter matched
  uint64_t dropped = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;   // held back for later frames to overtake
  uint64_t delayed = 0;
  uint64_t corrupted = 0;
  uint64_t rnr = 0;         // SENDs answered with an RNR NAK (rnr rules)
};

// The totals, the same split by direction, and what is held right now.
struct Counters : FaultCounts {
  FaultCounts tx, rx;
  uint64_t held = 0;  // frames delayed or reordered, not yet released
};

// A reordered frame that no later frame overtakes within this time goes out
// anyway, so a lone last packet is late rather than lost.
inline constexpr uint64_t kReorderReleaseAfterNs = 1'000'000;

class FaultInjector final : public Wire {
 public:
  FaultInjector(std::unique_ptr<Wire> inner, const Clock& clock);
  ~FaultInjector() override;
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  // Replaces the plan: restarts every rule's nth/limit count and the
  // frames' attempt counts. Frames already held stay held and are released
  // as scheduled. Out-of-range fields are clamped (p to 0..1, depth >= 1,
  // delays to kMaxDelayNs).
  void set_plan(const Plan& plan);
  Plan plan() const;

  // Who frames are (frame_identity.h): the engine's QPs, and this
  // process's salt. Set before traffic flows; `conversations` outlives the
  // injector's traffic. Without them frames are known by their PSNs as
  // sent and their QPNs' absence, and the salt is 0.
  void set_conversations(ConversationDirectory* conversations) { conversations_ = conversations; }
  void set_salt(uint64_t salt) { salt_ = salt; }

  // Counts of injected faults since construction (set_plan keeps them).
  // Named apart from Wire::counters(), which reports the inner wire's.
  Counters fault_counters() const;

  Wire& inner() { return *inner_; }

  // Every frame sent or received from now on is shown to `observer` with
  // its fate (frame_observer.h); nullptr ends that. May change while
  // traffic flows: a frame being shown as it changes still reaches the old
  // observer, so every observer set must outlive the injector.
  void set_observer(FrameObserver* observer) {
    observer_.store(observer, std::memory_order_release);
  }
  FrameObserver* observer() const { return observer_.load(std::memory_order_acquire); }
  bool observed() const { return observer() != nullptr; }
  // Every packet must be a frame of its own: for rules or an observer to see.
  bool sees_every_packet() const { return observed() || has_rules(); }

  // Wire.
  bool send(const WireAddress& dst, std::span<const uint8_t> frame) override;
  // With no tx rule and nothing held, straight to the inner wire's
  // send_with (the frame is written in place there); otherwise the frame is
  // written into a local buffer and goes through send(), faults and all.
  bool send_with(const WireAddress& dst, size_t max_bytes, FrameWriter& writer) override;
  // Returns the frames delivered, counting a received frame that a fault
  // dropped or held as one, so a caller that polls until 0 drains the inner
  // wire even when a whole batch is lost.
  size_t poll(const std::function<void(std::span<const uint8_t>)>& deliver,
              size_t budget) override;
  void begin_burst() override { inner_->begin_burst(); }
  void end_burst() override { inner_->end_burst(); }
  void joined_multicast(uint32_t device_index, const Gid& gid, uint32_t member_qpn,
                        std::span<const uint32_t> ifindexes) override {
    inner_->joined_multicast(device_index, gid, member_qpn, ifindexes);
  }
  void left_multicast(uint32_t device_index, const Gid& gid, uint32_t member_qpn) override {
    inner_->left_multicast(device_index, gid, member_qpn);
  }
  // True while the plan has any rule: then every packet must be a frame of
  // its own, for the rules to see.
  bool has_rules() const {
    return has_tx_rules_.load(std::memory_order_relaxed) ||
           has_rx_rules_.load(std::memory_order_relaxed) ||
           has_rnr_rules_.load(std::memory_order_relaxed);
  }
  // Whether an rnr rule answers this SEND, arrived in sequence at `qp`'s
  // responder, with an RNR NAK as if no receive WQE were posted. Decided
  // from the SEND's identity like any fault (frame_identity.h); its attempt
  // counts how often the responder asked for it, so an RNR retry gets a
  // decision of its own.
  bool answers_with_rnr(const Conversation& qp, const packet::Headers& headers);
  bool may_have_input() const override {
    return held_frames_.load(std::memory_order_relaxed) != 0 || inner_->may_have_input();
  }
  // True while frames are held here or by the inner wire.
  bool has_deferred() const override;
  // `alarm` is called with the release time of the earliest held frame
  // each time that time changes (a frame held to go before the others, the
  // earliest ones released), with the injector's lock held: it must not
  // call back in. Set it before frames pass.
  using ReleaseAlarm = std::function<void(uint64_t release_ns)>;
  void set_release_alarm(ReleaseAlarm alarm) { release_alarm_ = std::move(alarm); }
  WireCounters counters() const override { return inner_->counters(); }

 private:
  // A frame held back by a delay or reorder rule.
  struct HeldFrame {
    Direction direction = Direction::kTx;  // kTx or kRx, never kBoth
    WireAddress dst;
    std::vector<uint8_t> bytes;
    uint64_t release_ns = 0;       // delay: due time; reorder: the time fallback
    uint32_t frames_to_pass = 0;   // reorder: later frames still to overtake it
  };

  // What becomes of one frame: sent/delivered `copies` times (as
  // `corrupted` if that is not empty), then the held frames it released.
  struct Outcome {
    bool held = false;  // by a delay or reorder rule
    int copies = 1;
    std::vector<uint8_t> corrupted;
    std::vector<HeldFrame> released;
  };

  struct RuleProgress {
    uint64_t matched = 0;   // for nth
    uint64_t injected = 0;  // for limit
  };

  // A frame as the rules see it: decoded (when it decodes) and its key.
  struct Examined {
    bool decoded = false;
    packet::DecodedPacket packet;
    uint64_t key = 0;
    // A request sent: its attempt is the sender's go-backs, not a count.
    std::optional<uint32_t> attempt;
    // A request its responder drops unseen: no rule is asked about it.
    bool passes_unconsidered = false;
  };
  // Decodes and names the frame; called without the mutex (the engine's
  // QP table is looked at).
  Examined examine(Direction direction, const WireAddress& dst, std::span<const uint8_t> frame);

  // Shows the observer one frame's outcome: its copies (or its drop or
  // hold), then the held frames it released.
  void observe(FrameObserver& observer, Direction direction, std::span<const uint8_t> frame,
               const Outcome& outcome);
  // The frame's identity, counted as an attempt only when a decision
  // needs it (a rule matched): frames no rule looks at cost no memory.
  class LazyIdentity {
   public:
    LazyIdentity(const Examined& examined, AttemptCounter& attempts)
        : examined_(examined), attempts_(attempts) {}
    const FrameIdentity& get() {
      if (!identity_)
        identity_ = FrameIdentity{examined_.key, examined_.attempt
                                                     ? *examined_.attempt
                                                     : attempts_.next(examined_.key)};
      return *identity_;
    }

   private:
    const Examined& examined_;
    AttemptCounter& attempts_;
    std::optional<FrameIdentity> identity_;
  };
  Outcome admit_locked(Direction direction, const WireAddress& dst,
                       std::span<const uint8_t> frame, const Examined& examined,
                       uint64_t now_ns);
  // The first rule that fires for the frame (its index), if any.
  std::optional<size_t> choose_rule_locked(Direction direction, const Examined& examined,
                                           LazyIdentity& identity);
  bool fires_locked(const Rule& rule, size_t index, RuleProgress& progress,
                    LazyIdentity& identity);
  // A frame went out in `direction`: held reorder frames it overtook count
  // down, and those done move to `released`.
  void note_passed_locked(Direction direction, std::vector<HeldFrame>& released);
  void hold_locked(HeldFrame frame);
  // Moves held frames that are due into `due`, in release order; stops
  // taking delayed rx frames once `rx_budget` of them are due.
  void take_due_locked(uint64_t now_ns, size_t rx_budget, std::vector<HeldFrame>& due);
  void update_schedule_locked();
  size_t receive(std::span<const uint8_t> frame,
                 const std::function<void(std::span<const uint8_t>)>& deliver);
  FaultCounts& counts_for_locked(Direction direction);

  const std::unique_ptr<Wire> inner_;
  std::atomic<FrameObserver*> observer_{nullptr};
  const Clock& clock_;

  mutable std::mutex mutex_;  // guards everything below but the atomics
  Plan plan_;
  std::vector<RuleProgress> progress_;  // one per plan_.rules entry
  AttemptCounter attempts_;
  uint64_t salt_ = 0;
  ConversationDirectory* conversations_ = nullptr;
  ReleaseAlarm release_alarm_;
  uint64_t next_release_ns_ = UINT64_MAX;  // of the held frames

  Counters counters_;
  std::multimap<uint64_t, HeldFrame> delayed_;          // by release time
  std::array<std::vector<HeldFrame>, 2> reordering_;    // [0] tx, [1] rx; arrival order

  // Read without the mutex by the fast paths.
  std::atomic<bool> has_tx_rules_{false};
  std::atomic<bool> has_rx_rules_{false};
  std::atomic<bool> has_rnr_rules_{false};
  std::atomic<uint64_t> held_frames_{0};
};

}  // namespace softverbs::fault
