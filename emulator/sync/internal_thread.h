// Threads softverbs starts inside the application's process (the progress
// thread, the control thread) run with every signal blocked, so a signal
// sent to the process reaches one of the application's own threads, as it
// would with libibverbs, which starts none: a handler that ends the process
// or interrupts a blocking verb runs where the application expects it, and a
// signal the application blocks to take it with sigwait() or a signalfd
// stays pending for it instead of being acted on here. Only the faults a
// thread's own accesses raise (SIGSEGV, SIGBUS) are left unblocked.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <thread>
#include <utility>

namespace softverbs {

template <class Fn>
std::thread start_internal_thread(Fn&& fn) {
  // A new thread inherits its creator's mask: block everything around the
  // creation, so no signal can land in the new thread before it runs.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  struct Restore {
    const sigset_t& mask;
    ~Restore() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{previous};
  // Faults are the exception: the HCA's own accesses to application memory
  // run on these threads too, and a fault there must reach app_memory's
  // handler (a blocked SIGSEGV or SIGBUS kills the process instead).
  return std::thread([fn = std::forward<Fn>(fn)]() mutable {
    sigset_t faults;
    sigemptyset(&faults);
    sigaddset(&faults, SIGSEGV);
    sigaddset(&faults, SIGBUS);
    pthread_sigmask(SIG_UNBLOCK, &faults, nullptr);
    fn();
  });
}

}  // namespace softverbs
