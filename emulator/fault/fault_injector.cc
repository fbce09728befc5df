#include "emulator/fault/fault_injector.h"

#include <algorithm>
#include <cmath>

#include "emulator/fault/bit_flip.h"
#include "emulator/packet/codec.h"

namespace softverbs::fault {
namespace {

size_t direction_index(Direction direction) { return direction == Direction::kRx ? 1 : 0; }

// Whether `rule` acts on frames passing in `direction`: an rnr rule acts on
// none (the responder asks it: answers_with_rnr).
bool applies_to(const Rule& rule, Direction direction) {
  if (rule.action == Action::kRnr) return false;
  return rule.direction == Direction::kBoth || rule.direction == direction;
}

// A SEND's key for rnr rules: apart from the key of the frame that carried it.
constexpr uint64_t kRnrKeyTag = 0x726e72'00000000;

// Moves the elements that satisfy `take` from `from` to the end of `to`,
// keeping the order of both. Unlike std::stable_partition it never allocates
// a scratch buffer.
template <typename T, typename Predicate>
void move_out_if(std::vector<T>& from, std::vector<T>& to, Predicate take) {
  size_t kept = 0;
  for (size_t i = 0; i < from.size(); ++i) {
    if (take(from[i])) {
      to.push_back(std::move(from[i]));
    } else {
      if (kept != i) from[kept] = std::move(from[i]);
      ++kept;
    }
  }
  from.resize(kept);
}

Rule sanitized(Rule rule) {
  rule.probability = std::isnan(rule.probability) ? 0.0 : std::clamp(rule.probability, 0.0, 1.0);
  rule.reorder_depth = std::max<uint32_t>(rule.reorder_depth, 1);
  rule.delay_ns = std::min(rule.delay_ns, kMaxDelayNs);
  rule.jitter_ns = std::min(rule.jitter_ns, kMaxDelayNs);
  return rule;
}

}  // namespace

FaultInjector::FaultInjector(std::unique_ptr<Wire> inner, const Clock& clock)
    : inner_(std::move(inner)), clock_(clock) {}

FaultInjector::~FaultInjector() = default;

void FaultInjector::set_plan(const Plan& plan) {
  std::lock_guard lock(mutex_);
  plan_.seed = plan.seed;
  plan_.rules.clear();
  bool tx = false, rx = false, rnr = false;
  for (const Rule& rule : plan.rules) {
    plan_.rules.push_back(sanitized(rule));
    tx = tx || applies_to(rule, Direction::kTx);
    rx = rx || applies_to(rule, Direction::kRx);
    rnr = rnr || rule.action == Action::kRnr;
  }
  progress_.assign(plan_.rules.size(), RuleProgress{});
  attempts_.clear();
  has_tx_rules_.store(tx, std::memory_order_release);
  has_rx_rules_.store(rx, std::memory_order_release);
  has_rnr_rules_.store(rnr, std::memory_order_release);
}

Plan FaultInjector::plan() const {
  std::lock_guard lock(mutex_);
  return plan_;
}

Counters FaultInjector::fault_counters() const {
  std::lock_guard lock(mutex_);
  Counters counters = counters_;
  counters.held = held_frames_.load(std::memory_order_relaxed);
  return counters;
}

FaultCounts& FaultInjector::counts_for_locked(Direction direction) {
  return direction == Direction::kRx ? counters_.rx : counters_.tx;
}

bool FaultInjector::send(const WireAddress& dst, std::span<const uint8_t> frame) {
  if (!has_tx_rules_.load(std::memory_order_relaxed) &&
      held_frames_.load(std::memory_order_relaxed) == 0) {
    if (FrameObserver* o = observer()) o->observe(Direction::kTx, frame, FrameFate::kPassed);
    return inner_->send(dst, frame);
  }
  // Only rules need to know who the frame is (a capture alone does not).
  const Examined examined = has_tx_rules_.load(std::memory_order_relaxed)
                                ? examine(Direction::kTx, dst, frame)
                                : Examined{};
  Outcome outcome;
  {
    std::lock_guard lock(mutex_);
    outcome = admit_locked(Direction::kTx, dst, frame, examined, clock_.now_ns());
  }
  if (FrameObserver* o = observer()) observe(*o, Direction::kTx, frame, outcome);
  const std::span<const uint8_t> bytes =
      outcome.corrupted.empty() ? frame : std::span<const uint8_t>(outcome.corrupted);
  bool routed = true;  // a dropped or held frame counts as handed over
  for (int i = 0; i < outcome.copies; ++i) {
    const bool sent = inner_->send(dst, bytes);
    if (i == 0) routed = sent;
  }
  for (const HeldFrame& held : outcome.released) inner_->send(held.dst, held.bytes);
  return routed;
}

bool FaultInjector::send_with(const WireAddress& dst, size_t max_bytes, FrameWriter& writer) {
  // An observer must see the bytes, so they cannot go straight to the wire.
  if (!observer() && !has_tx_rules_.load(std::memory_order_relaxed) &&
      held_frames_.load(std::memory_order_relaxed) == 0) {
    return inner_->send_with(dst, max_bytes, writer);
  }
  return Wire::send_with(dst, max_bytes, writer);  // a local buffer, then send()
}

size_t FaultInjector::poll(const std::function<void(std::span<const uint8_t>)>& deliver,
                           size_t budget) {
  if (!observer() && !has_rx_rules_.load(std::memory_order_relaxed) &&
      held_frames_.load(std::memory_order_relaxed) == 0) {
    return inner_->poll(deliver, budget);
  }

  std::vector<HeldFrame> due;
  if (held_frames_.load(std::memory_order_relaxed) != 0) {
    std::lock_guard lock(mutex_);
    take_due_locked(clock_.now_ns(), budget, due);
  }
  size_t delivered = 0;
  for (const HeldFrame& held : due) {
    if (FrameObserver* o = observer())
      o->observe(held.direction, held.bytes, FrameFate::kReleased);
    if (held.direction == Direction::kTx) {
      inner_->send(held.dst, held.bytes);
    } else {
      deliver(held.bytes);
      ++delivered;
    }
  }
  if (delivered >= budget) return delivered;

  // One pointer of capture keeps the std::function below in its small
  // buffer: no allocation per poll.
  struct Receiving {
    FaultInjector* self;
    const std::function<void(std::span<const uint8_t>)>* deliver;
    size_t delivered;
  } receiving{this, &deliver, delivered};
  inner_->poll(
      [&receiving](std::span<const uint8_t> frame) {
        receiving.delivered += receiving.self->receive(frame, *receiving.deliver);
      },
      budget - delivered);
  return receiving.delivered;
}

size_t FaultInjector::receive(std::span<const uint8_t> frame,
                              const std::function<void(std::span<const uint8_t>)>& deliver) {
  const Examined examined = has_rx_rules_.load(std::memory_order_relaxed)
                                ? examine(Direction::kRx, WireAddress{}, frame)
                                : Examined{};
  Outcome outcome;
  {
    std::lock_guard lock(mutex_);
    outcome = admit_locked(Direction::kRx, WireAddress{}, frame, examined, clock_.now_ns());
  }
  if (FrameObserver* o = observer()) observe(*o, Direction::kRx, frame, outcome);
  const std::span<const uint8_t> bytes =
      outcome.corrupted.empty() ? frame : std::span<const uint8_t>(outcome.corrupted);
  for (int i = 0; i < outcome.copies; ++i) deliver(bytes);
  for (const HeldFrame& held : outcome.released) deliver(held.bytes);
  // A dropped or held frame still counts as handled (see poll()).
  return std::max<size_t>(1, outcome.copies + outcome.released.size());
}

void FaultInjector::observe(FrameObserver& observer, Direction direction,
                            std::span<const uint8_t> frame, const Outcome& outcome) {
  const std::span<const uint8_t> bytes =
      outcome.corrupted.empty() ? frame : std::span<const uint8_t>(outcome.corrupted);
  if (outcome.held) {
    observer.observe(direction, frame, FrameFate::kHeld);
  } else if (outcome.copies == 0) {
    observer.observe(direction, frame, FrameFate::kDropped);
  } else {
    observer.observe(direction, bytes,
                     outcome.corrupted.empty() ? FrameFate::kPassed : FrameFate::kCorrupted);
    for (int i = 1; i < outcome.copies; ++i)
      observer.observe(direction, bytes, FrameFate::kDuplicate);
  }
  for (const HeldFrame& held : outcome.released)
    observer.observe(direction, held.bytes, FrameFate::kReleased);
}

bool FaultInjector::has_deferred() const {
  return held_frames_.load(std::memory_order_relaxed) != 0 || inner_->has_deferred();
}

bool FaultInjector::answers_with_rnr(const Conversation& qp, const packet::Headers& headers) {
  if (!has_rnr_rules_.load(std::memory_order_relaxed)) return false;
  Examined examined;
  examined.decoded = true;
  examined.key = packet_key(Direction::kRx, qp, headers) ^ kRnrKeyTag;
  std::lock_guard lock(mutex_);
  LazyIdentity identity(examined, attempts_);
  for (size_t i = 0; i < plan_.rules.size(); ++i) {
    const Rule& rule = plan_.rules[i];
    if (rule.action != Action::kRnr) continue;
    if (rule.qpn && *rule.qpn != headers.bth.dest_qp) continue;
    if (rule.opcode && *rule.opcode != static_cast<uint8_t>(headers.bth.opcode)) continue;
    RuleProgress& progress = progress_[i];
    ++progress.matched;
    ++counters_.rx.matched;
    ++counters_.matched;
    if (!fires_locked(rule, i, progress, identity)) continue;
    ++progress.injected;
    ++counters_.rx.rnr;
    ++counters_.rnr;
    if (conversations_)
      conversations_->fault_applied(Direction::kRx, WireAddress{}, headers, Action::kRnr,
                                    identity.get().attempt);
    return true;
  }
  return false;
}

FaultInjector::Examined FaultInjector::examine(Direction direction, const WireAddress& dst,
                                               std::span<const uint8_t> frame) {
  Examined e;
  e.decoded = packet::decode_ib(frame, e.packet) == packet::DecodeError::kNone;
  if (!e.decoded) {
    e.key = bytes_key(direction, frame);
    return e;
  }
  std::optional<Conversation> qp;
  if (conversations_) {
    qp = direction == Direction::kTx ? conversations_->of_sender(dst)
                                     : conversations_->of_receiver(e.packet.headers);
  }
  e.key = packet_key(direction, qp, e.packet.headers);
  if (qp && packet::opcode_info(static_cast<uint8_t>(e.packet.headers.bth.opcode)).is_request) {
    if (direction == Direction::kTx) e.attempt = qp->resend_rounds;
    e.passes_unconsidered = qp->discarded_unseen;
  }
  return e;
}

FaultInjector::Outcome FaultInjector::admit_locked(Direction direction, const WireAddress& dst,
                                                   std::span<const uint8_t> frame,
                                                   const Examined& examined, uint64_t now_ns) {
  Outcome outcome;
  LazyIdentity identity(examined, attempts_);
  const std::optional<size_t> index =
      examined.passes_unconsidered ? std::nullopt
                                   : choose_rule_locked(direction, examined, identity);
  if (!index) {
    note_passed_locked(direction, outcome.released);
    update_schedule_locked();
    return outcome;
  }
  const Rule* rule = &plan_.rules[*index];
  // What the rule does with the frame (the bit it flips, the jitter) comes
  // from the same numbers as its decision, past the draw that decided.
  Random random = decision_random(plan_.seed, salt_, *index, identity.get());
  random.next();
  if (conversations_ && examined.decoded)
    conversations_->fault_applied(direction, dst, examined.packet.headers, rule->action,
                                  identity.get().attempt);

  FaultCounts& counts = counts_for_locked(direction);
  auto count = [&](uint64_t FaultCounts::*field) {
    ++(counts.*field);
    ++(counters_.*field);
  };
  switch (rule->action) {
    case Action::kDrop:
      count(&FaultCounts::dropped);
      outcome.copies = 0;
      break;
    case Action::kDuplicate:
      count(&FaultCounts::duplicated);
      outcome.copies = 2;
      note_passed_locked(direction, outcome.released);
      break;
    case Action::kCorrupt:
      count(&FaultCounts::corrupted);
      if (!frame.empty()) {
        outcome.corrupted.assign(frame.begin(), frame.end());
        flip_bit(outcome.corrupted, choose_bit_to_flip(frame, random));
      }
      note_passed_locked(direction, outcome.released);
      break;
    case Action::kDelay: {
      count(&FaultCounts::delayed);
      outcome.copies = 0;
      outcome.held = true;
      const uint64_t jitter = rule->jitter_ns ? random.below(rule->jitter_ns + 1) : 0;
      hold_locked(HeldFrame{direction, dst, {frame.begin(), frame.end()},
                            now_ns + rule->delay_ns + jitter, 0});
      break;
    }
    case Action::kReorder:
      count(&FaultCounts::reordered);
      outcome.copies = 0;
      outcome.held = true;
      hold_locked(HeldFrame{direction, dst, {frame.begin(), frame.end()},
                            now_ns + kReorderReleaseAfterNs, rule->reorder_depth});
      break;
    case Action::kRnr:  // never chosen for a frame (applies_to)
      note_passed_locked(direction, outcome.released);
      break;
  }
  update_schedule_locked();
  return outcome;
}

std::optional<size_t> FaultInjector::choose_rule_locked(Direction direction,
                                                        const Examined& examined,
                                                        LazyIdentity& identity) {
  const packet::Headers& headers = examined.packet.headers;
  std::optional<size_t> chosen;
  bool matched = false;
  for (size_t i = 0; i < plan_.rules.size(); ++i) {
    const Rule& rule = plan_.rules[i];
    if (!applies_to(rule, direction)) continue;
    if (rule.qpn || rule.opcode) {
      if (!examined.decoded) continue;  // unreadable: only filterless rules match
      if (rule.qpn && *rule.qpn != headers.bth.dest_qp) continue;
      if (rule.opcode && *rule.opcode != static_cast<uint8_t>(headers.bth.opcode)) continue;
    }
    matched = true;
    RuleProgress& progress = progress_[i];
    ++progress.matched;  // every rule counts its matches, for its own nth
    if (!chosen && fires_locked(rule, i, progress, identity)) {
      ++progress.injected;
      chosen = i;
    }
  }
  if (matched) {
    ++counts_for_locked(direction).matched;
    ++counters_.matched;
  }
  return chosen;
}

bool FaultInjector::fires_locked(const Rule& rule, size_t index, RuleProgress& progress,
                                 LazyIdentity& identity) {
  if (rule.nth != 0 && progress.matched != rule.nth) return false;
  if (rule.limit != 0 && progress.injected >= rule.limit) return false;
  if (rule.probability >= 1.0) return true;
  if (rule.probability <= 0.0) return false;
  return decision_random(plan_.seed, salt_, index, identity.get()).uniform() < rule.probability;
}

void FaultInjector::note_passed_locked(Direction direction, std::vector<HeldFrame>& released) {
  std::vector<HeldFrame>& waiting = reordering_[direction_index(direction)];
  for (HeldFrame& held : waiting) --held.frames_to_pass;
  // Released in arrival order, right after the frame that overtook them.
  move_out_if(waiting, released, [](const HeldFrame& held) { return held.frames_to_pass == 0; });
}

void FaultInjector::hold_locked(HeldFrame frame) {
  if (frame.frames_to_pass != 0) {
    reordering_[direction_index(frame.direction)].push_back(std::move(frame));
  } else {
    const uint64_t release_ns = frame.release_ns;
    delayed_.emplace(release_ns, std::move(frame));  // after equal times: FIFO
  }
}

void FaultInjector::take_due_locked(uint64_t now_ns, size_t rx_budget,
                                    std::vector<HeldFrame>& due) {
  size_t rx_taken = 0;
  while (!delayed_.empty() && delayed_.begin()->first <= now_ns && rx_taken < rx_budget) {
    HeldFrame frame = std::move(delayed_.begin()->second);
    delayed_.erase(delayed_.begin());
    const Direction direction = frame.direction;
    if (direction == Direction::kRx) ++rx_taken;
    due.push_back(std::move(frame));
    note_passed_locked(direction, due);  // a released delayed frame overtakes reordered ones
  }
  for (std::vector<HeldFrame>& waiting : reordering_) {
    move_out_if(waiting, due, [now_ns](const HeldFrame& held) { return held.release_ns <= now_ns; });
  }
  update_schedule_locked();
}

void FaultInjector::update_schedule_locked() {
  uint64_t next = delayed_.empty() ? UINT64_MAX : delayed_.begin()->first;
  uint64_t held = delayed_.size();
  for (const std::vector<HeldFrame>& waiting : reordering_) {
    held += waiting.size();
    for (const HeldFrame& frame : waiting) next = std::min(next, frame.release_ns);
  }
  held_frames_.store(held, std::memory_order_relaxed);
  const bool moved = next != next_release_ns_;
  next_release_ns_ = next;
  if (moved && next != UINT64_MAX && release_alarm_) release_alarm_(next);
}

}  // namespace softverbs::fault
