// How a process's intake sleeps and is woken: the other face of the wire
// that brings its frames (on one host, the shared-memory mailbox). Only the
// engine's intake scheduler (progress_thread.cc, packet_intake.cc) and the
// routed wire's receive thread use it; the wire itself carries frames only,
// and wrappers of it (the fault injector) need not know it. A frame the
// injector holds back wakes the intake through an engine timer instead
// (FaultInjector::set_release_alarm).
#pragma once

#include <atomic>
#include <cstdint>

namespace softverbs {

class Doorbell {
 public:
  virtual ~Doorbell() = default;

  // Sleeps until a frame may have arrived, wake() is called, or
  // `timeout_ns` passes (0: don't sleep). Only one thread waits at a time.
  virtual void wait(uint64_t timeout_ns) = 0;
  virtual void wake() = 0;

  // An application thread is about to poll (and has polled): while one is
  // polling, senders need not wake this process's waiter. end returns true
  // when a frame may have arrived unseen: the caller must then wake().
  virtual void begin_application_poll() {}
  virtual bool end_application_poll() { return false; }
  // The same for an announcement that stands between polls (emulator/
  // engine/standing_poll.h): senders count it only while the waiter sleeps
  // beside pollers (it then wakes now and then to see whether the polls
  // went on), not while it sleeps unaware of them.
  virtual void begin_standing_poll() { begin_application_poll(); }
  virtual bool end_standing_poll() { return end_application_poll(); }
  // True while an application thread of this process is inside a poll.
  virtual bool application_polling() const { return false; }
  // An announcement that stands between polls (emulator/engine/
  // standing_poll.h) is paused: a poll returned completions, and the
  // program may not poll again soon. Senders treat it as no poller until
  // it resumes at the next poll.
  virtual void pause_application_poll(bool paused) { (void)paused; }
  // As wait(), but frames that come while an application thread polls are
  // left to it: the sleep ends for a frame that comes with no one polling,
  // one the last poller leaves unseen (it wakes), wake(), or `timeout_ns`.
  // Only the thread that calls wait() calls it.
  virtual void wait_while_application_polls(uint64_t timeout_ns) { wait(timeout_ns); }

  // An application thread about to block for completion events offers to
  // serve the intake itself while it sleeps: returns a futex word (shared
  // between processes, holding 1) that senders ring instead of waking
  // wait()'s thread, or null (no such doorbell, or another thread has it).
  // end_application_sleep() follows whatever ended the sleep and returns
  // true when a frame came for that thread to serve.
  virtual std::atomic<uint32_t>* begin_application_sleep() { return nullptr; }
  virtual bool end_application_sleep() { return false; }
};

}  // namespace softverbs
