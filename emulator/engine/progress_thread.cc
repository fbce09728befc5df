// The progress thread: serves what arrives while no application thread is
// calling in, without burning a core when the process is idle.
//
//   serving    frames or timers came: serve them, note the time
//   spinning   for a short while after activity, keep looking: the next
//              frame of a one-sided exchange comes within microseconds
//   sleeping   nothing for a while: announce the sleep on the doorbell and
//              wait for a frame, a wake() or the next timer deadline (peers
//              skip the doorbell while an application thread polls, which
//              serves what comes)
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "emulator/engine/engine.h"
#include "emulator/same_host/peer_pages.h"
#include "emulator/same_host/target_table.h"
#include "emulator/wire/futex.h"

namespace softverbs {
namespace {

// The longest the progress thread sleeps with nothing to do. A timer armed
// by another thread wakes it (Engine::schedule_timer), so this only bounds
// the wake-ups of an idle process.
constexpr uint64_t kIdleSleepNs = 1'000'000'000;
// While frames wait for room at a peer.
constexpr uint64_t kDeferredRetryNs = 20'000;
constexpr int kProgressThreadNice = -10;
constexpr long kYieldToApplicationNs = 20'000;
// How long fork() waits for the progress thread to park: 100 ms.
constexpr int kForkParkPolls = 2'000;
constexpr long kForkParkPollNs = 50'000;

// How long to keep looking after activity: SOFTVERBS_PROGRESS_SPIN_US, by
// default long enough to catch the next frame of a ping-pong, and nothing
// on a machine with too few cores to spare one.
uint64_t spin_after_activity_ns() {
  if (const char* text = std::getenv("SOFTVERBS_PROGRESS_SPIN_US"); text && *text) {
    char* end = nullptr;
    const unsigned long us = std::strtoul(text, &end, 10);
    if (end && *end == '\0' && us <= 1'000'000) return us * 1000;
  }
  cpu_set_t cpus;
  const bool known = sched_getaffinity(0, sizeof cpus, &cpus) == 0;
  return known && CPU_COUNT(&cpus) >= 4 ? 50'000 : 0;
}

// How long to sleep for a timer deadline, at most kIdleSleepNs.
uint64_t sleep_ns_until(uint64_t deadline_ns, uint64_t now_ns) {
  if (deadline_ns == UINT64_MAX) return kIdleSleepNs;
  return deadline_ns > now_ns ? std::min(kIdleSleepNs, deadline_ns - now_ns) : 0;
}

void nap(long ns) {
  timespec t{0, ns};
  nanosleep(&t, nullptr);
}

}  // namespace

void Engine::progress_thread_main() {
  pthread_setname_np(pthread_self(), "softverbs-prog");
  // Serving a one-sided operation whose target spins on memory needs this
  // thread on a CPU at once, ahead of the spinning application threads.
  // Best effort: without CAP_SYS_NICE the call fails and nothing changes.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kProgressThreadNice);
  // Timer deadlines are short (a retransmit after tens of microseconds);
  // the default 50 us of timer slack would stretch them.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  const uint64_t spin_ns = spin_after_activity_ns();
  uint64_t last_activity_ns = 0;
  // This thread lives as long as the engine: its death is the process's.
  same_host_.target_table().hold_liveness();
  progress_thread_alive_.store(1, std::memory_order_release);
  futex_wake_shared(progress_thread_alive_, 1);

  while (!stopping_.load(std::memory_order_relaxed)) {
    if (fork_gate_.load(std::memory_order_acquire) != 0) park_for_fork();
    PeerPages::tidy();  // peers' pages they let go of
    const bool application_serves = doorbell_.application_polling();
    const size_t served = application_serves ? kIntakeBusy : progress_on_progress_thread(256);
    if (served == kIntakeBusy) {
      // An application thread is polling or serving right now: it takes
      // what comes. Stay out of its way, asleep: a nap would take the CPU
      // from it on every wake-up. Peers skip the doorbell while it polls,
      // and the last poller to leave a frame behind wakes this thread.
      if (!application_serves || !serve_due_timers_beside_poller())
        nap(kYieldToApplicationNs);  // it serves outside a poll, briefly
      else
        sleep_beside_standing_poll();
      continue;
    }
    if (served != 0) {
      last_activity_ns = clock_->now_ns();
      continue;
    }
    if (clock_->now_ns() - last_activity_ns < spin_ns) {
      sched_yield();
      continue;
    }
    if (wire_->has_deferred()) {
      doorbell_.wait(kDeferredRetryNs);  // frames wait for room at a peer
      continue;
    }
    if (standing_poll_.standing())
      sleep_beside_standing_poll();  // paused: see there
    else
      sleep_until_woken(SleepUntil::kFrameArrives);
  }
  same_host_.target_table().release_liveness();
}

void Engine::sleep_beside_standing_poll() {
  // The program polled, then went on to other work: frames that came
  // meanwhile are this thread's (served on the next round).
  if (standing_poll_.lapsed(clock_->now_ns())) {
    standing_poll_.withdraw();
    return;
  }
  // Also while the poll is paused (its last poll returned completions):
  // a latency loop is back at its poll within moments, posting its answer
  // in between, and a producer gives a paused poller that moment before it
  // rings a thread asleep beside it (ShmMailbox::ring_doorbell). Asleep as
  // if no one polled, this thread was rung for the next frame instead,
  // served it in the poller's place and, finding the poller paused again,
  // slept so once more: one round trip in four cost a wake-up and a CPU
  // taken from the poller (`ib_send_lat -c UC`: 5.5 µs on average against
  // 0.64 µs typical).
  sleep_until_woken(SleepUntil::kNoOnePolls);
}

bool Engine::serve_due_timers_beside_poller() {
  // A poller looks at the timers only on every 16th poll, and a deadline
  // that came due would end each sleep at once: this thread would spin
  // (at its raised priority, taking the CPU from the very poller that
  // could serve it). So it serves the timers itself, not the frames.
  if (timers_.next_deadline_ns() > clock_->now_ns()) return true;
  std::unique_lock lock(intake_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // the poller serves, timers included
  run_due_timers();
  return true;
}

void Engine::park_for_fork() {
  progress_parked_.store(1, std::memory_order_release);
  while (fork_gate_.load(std::memory_order_acquire) != 0) fork_gate_.wait(1);
  progress_parked_.store(0, std::memory_order_relaxed);
}

void Engine::hold_progress_for_fork() {
  // The progress thread itself forking (from a callback) holds nothing.
  if (!progress_thread_.joinable() || progress_thread_.get_id() == std::this_thread::get_id())
    return;
  fork_gate_.store(1, std::memory_order_release);
  doorbell_.wake();
  for (int i = 0; i < kForkParkPolls; ++i) {
    if (progress_parked_.load(std::memory_order_acquire) != 0) return;
    nap(kForkParkPollNs);
  }
}

void Engine::release_progress_after_fork() {
  if (fork_gate_.exchange(0, std::memory_order_acq_rel) != 0) fork_gate_.notify_all();
}

void Engine::sleep_until_woken(SleepUntil until) {
  const uint64_t now = clock_->now_ns();
  uint64_t sleep = sleep_ns_until(timers_.next_deadline_ns(), now);
  if (sleep == 0) return;
  // Beside a standing poll, looking now and then whether it lapsed.
  if (until == SleepUntil::kNoOnePolls && standing_poll_.standing())
    sleep = std::min(sleep, standing_poll_.look_interval_ns());
  progress_sleeps_until_ns_.store(now + sleep, std::memory_order_seq_cst);
  // A timer armed since the look above saw no sleeper to wake: look again
  // now that the sleep is published (see Engine::schedule_timer).
  sleep = std::min(sleep, sleep_ns_until(timers_.next_deadline_ns(), now));
  if (sleep != 0) {
    if (until == SleepUntil::kFrameArrives)
      doorbell_.wait(sleep);
    else
      doorbell_.wait_while_application_polls(sleep);
  }
  progress_sleeps_until_ns_.store(0, std::memory_order_relaxed);
}

}  // namespace softverbs
