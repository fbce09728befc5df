// An application poll announcement that stands between polls.
//
// While an application thread polls, peers skip this process's doorbell
// (Doorbell::begin_application_poll). Said around each poll, the
// announcement costs two locked writes per poll on a line that every
// sender reads, so a thread spinning in ibv_poll_cq moved that line back
// and forth on each frame's way in and out: about a fifth of an 8-byte
// SEND's one-way time. Here the first poll announces and the
// announcement stands, each later poll adding one private "beat" (no
// shared write). It is withdrawn:
// - when an application thread is about to block for completion events
//   (ibv_req_notify_cq, the event waiter): senders must ring again;
// - by the progress thread once no poll came for the lease: a program
//   that polled, found nothing and went on to other work leaves it behind,
//   and a frame that came meanwhile waits until that thread looks. It
//   looks a lease after the announcement, then at intervals that double
//   while the polls go on, up to kLongestLookNs: each look is a wake-up,
//   and on two cores a wake-up takes the CPU from a poller for several
//   microseconds (a 1 µs ping-pong round trip made slow), so a program
//   that polls for good is looked at about a hundred times a second
//   instead of a thousand, and a frame left behind by one that stopped
//   waits at most about two intervals (16 ms; a local ACK timeout
//   meanwhile is re-armed, not counted: fair_timeout.h);
// - when the engine stops.
// A poll after a withdrawal announces again. The engine stands only the
// polls of a thread that polls without arming a CQ (Engine::
// poll_for_application); an event-driven thread's last poll before its
// sleep would leave an announcement that holds frames back from the
// thread a sender would wake.
//
// Between a poll that returned completions and the next poll the
// announcement is paused (one plain store each way, read by senders with
// the announcement). The progress thread sleeps beside it all the same
// (Engine::sleep_beside_standing_poll), and a sender facing a paused
// poller waits up to 2 µs for it before it rings (ShmMailbox::
// ring_doorbell): a latency loop back at its poll by then has its frames
// left to it; a program that got what it polled for and went on to other
// work has them rung for that late, until the lease ends. The lease
// catches what is left: a poll that found nothing and was the program's
// last for a while, and a frame published just as its poller paused.
//
// Threads: poll() from any application thread; withdraw() from any;
// lapsed() from the progress thread only. No lock (standing_poll.cc).
#pragma once

#include <atomic>
#include <cstdint>

#include "emulator/wire/doorbell.h"

namespace softverbs {

class alignas(64) StandingPoll {
 public:
  // How long the announcement stands with no poll before the progress
  // thread withdraws it, and when that thread first looks.
  static constexpr uint64_t kLeaseNs = 1'000'000;
  // The longest the progress thread waits between two looks.
  static constexpr uint64_t kLongestLookNs = 8 * kLeaseNs;

  explicit StandingPoll(Doorbell& doorbell) : doorbell_(doorbell) {}

  // Called by every application poll, before it looks at the intake: the
  // first announces (ordered before that look, as Doorbell requires).
  void poll() {
    beat_.store(beat_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    if (!standing_.load(std::memory_order_relaxed)) stand();
    if (paused_.load(std::memory_order_relaxed) && paused_.exchange(false))
      doorbell_.pause_application_poll(false);
  }
  // A poll returned completions: the program may go on to other work now,
  // so senders ring again until it polls again (a plain store: it is on
  // the way of each completion to the program).
  void returned_completions() {
    if (standing_.load(std::memory_order_relaxed) && !paused_.load(std::memory_order_relaxed) &&
        !paused_.exchange(true))
      doorbell_.pause_application_poll(true);
  }
  bool standing() const { return standing_.load(std::memory_order_relaxed); }

  // Withdraws the announcement, if it stands. True when a frame may be
  // waiting that no one was rung for: the caller must serve the intake or
  // wake() the doorbell.
  bool withdraw();

  // Progress thread: whether the announcement stands and no poll came in
  // the last kLeaseNs before `now_ns` (counted from when it first looks).
  bool lapsed(uint64_t now_ns);
  // Progress thread: how long to sleep before the next look.
  uint64_t look_interval_ns() const { return look_interval_ns_; }

 private:
  void stand();

  Doorbell& doorbell_;
  std::atomic<bool> standing_{false};
  std::atomic<bool> paused_{false};
  std::atomic<uint32_t> beat_{0};  // polls, wrapping; a racy count is fine
  std::atomic<uint32_t> announcements_{0};  // wrapping
  // The progress thread's view of the beat and the announcements.
  uint32_t beat_seen_ = 0;
  uint64_t beat_seen_ns_ = 0;
  uint32_t announcements_seen_ = 0;
  uint64_t look_interval_ns_ = kLeaseNs;
};

}  // namespace softverbs
