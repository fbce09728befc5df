// A FIFO of events behind an eventfd that poll()/epoll report readable
// exactly while the FIFO holds something: the file descriptor of a
// completion channel or of a context's async events.
//
// Invariant (under mutex_): the eventfd counter is 1 when items_ is non-empty
// and 0 when it is empty, except while the thread that pushed is itself
// blocked in pop() (below). push() writes only on the empty -> non-empty
// edge, and whoever empties the FIFO reads the counter back to 0, so
// neither ever blocks.
//
// Threads: push() may run on any thread, including the emulator's progress
// thread with the engine lock held (it only records and signals). pop() may
// block; it never holds mutex_ while waiting.
//
// A blocked pop() waits on a futex word that every push() bumps, not in
// poll(): the kernel restarts FUTEX_WAIT after a signal handler installed
// with SA_RESTART and fails it with EINTR after one without, which is what
// libibverbs' read() of the kernel's event file does. poll() would fail with
// EINTR either way.
//
// While it sleeps, a blocked pop() may serve the device's intake itself
// (the `sleep` argument: CompletionChannel passes Hca::wait_serving_intake),
// so that a frame wakes this thread once rather than the progress thread
// and then this one. An item it pushes so is its own to take the moment it
// leaves the sleep: it neither writes the eventfd nor wakes itself. The
// eventfd is brought in line when it takes an item (written if items
// remain) or when a signal ends its wait. Three system calls fewer per
// event, each about a microsecond in a VM (`bench_thread_peers`).
#pragma once

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <deque>
#include <mutex>
#include <utility>

#include "emulator/types.h"

namespace softverbs::provider {

// The queue whose pop() this thread is blocked in, if any.
inline thread_local const void* queue_this_thread_pops = nullptr;

template <class T>
class EventFdQueue {
 public:
  EventFdQueue() = default;
  EventFdQueue(const EventFdQueue&) = delete;
  EventFdQueue& operator=(const EventFdQueue&) = delete;
  ~EventFdQueue() {
    if (fd_ >= 0) ::close(fd_);
  }

  Errno open() {
    fd_ = ::eventfd(0, EFD_CLOEXEC);
    return fd_ < 0 ? errno : 0;
  }
  int fd() const { return fd_; }

  // Returns false (event dropped) only when memory is exhausted.
  bool push(const T& item) noexcept {
    const bool pusher_waits = queue_this_thread_pops == this;
    {
      std::lock_guard lock(mutex_);
      try {
        items_.push_back(item);
      } catch (...) {
        return false;
      }
      if (!pusher_waits) settle_counter_locked();
      pushes_.fetch_add(1, std::memory_order_seq_cst);
    }
    if (waiters_.load(std::memory_order_seq_cst) > (pusher_waits ? 1u : 0u))
      ::syscall(SYS_futex, futex_word(), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
    return true;
  }

  // Takes the oldest event; `on_pop(item)` runs before the lock is released,
  // so whoever purges events after it sees its effects. Waits while the FIFO
  // is empty, unless the application made fd() non-blocking (then EAGAIN),
  // like a read() of a kernel event file. A wait interrupted by a signal is
  // resumed if the handler was installed with SA_RESTART, else it fails with
  // EINTR, as that read() does.
  template <class OnPop>
  Errno pop(T& out, OnPop&& on_pop) {
    return pop(out, on_pop, [](std::atomic<uint32_t>&, uint32_t) -> Errno { return ENOSYS; });
  }
  // The same, sleeping through `sleep(word, expected)`: it returns once
  // `word` no longer holds `expected` (or spuriously) with 0, EINTR, or
  // ENOSYS when it cannot sleep, and pop() then waits by itself.
  template <class OnPop, class Sleep>
  Errno pop(T& out, OnPop&& on_pop, Sleep&& sleep) {
    for (;;) {
      uint32_t seen;
      {
        std::lock_guard lock(mutex_);
        if (!items_.empty()) {
          out = items_.front();
          items_.pop_front();
          on_pop(out);
          settle_counter_locked();
          return 0;
        }
        seen = pushes_.load(std::memory_order_relaxed);
      }
      const int flags = ::fcntl(fd_, F_GETFL);
      if (flags < 0) return errno;
      if (flags & O_NONBLOCK) return EAGAIN;
      waiters_.fetch_add(1, std::memory_order_seq_cst);
      const void* outer = std::exchange(queue_this_thread_pops, this);
      Errno err = sleep(pushes_, seen);
      queue_this_thread_pops = outer;
      if (err == ENOSYS) err = wait_for_push(seen);
      waiters_.fetch_sub(1, std::memory_order_relaxed);
      if (err == EINTR) {
        // What this thread pushed while it slept stays for whoever reads.
        std::lock_guard lock(mutex_);
        settle_counter_locked();
        return EINTR;
      }
      // Woken, spurious wake-up, or EAGAIN (a push came first): look again.
    }
  }

  template <class Pred>
  void remove_if(Pred&& pred) {
    std::lock_guard lock(mutex_);
    std::erase_if(items_, pred);
    settle_counter_locked();
  }

 private:
  // Brings the eventfd counter to 1 when the FIFO holds something, to 0
  // when it is empty.
  void settle_counter_locked() {
    if (items_.empty() == !signalled_) return;
    signalled_ = !signalled_;
    if (signalled_) {
      const uint64_t one = 1;
      // Cannot fail: the counter is 0 here and eventfd accepts up to 2^64-2.
      [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof(one));
    } else {
      uint64_t value;
      // Cannot block: the counter is 1 here.
      [[maybe_unused]] ssize_t n = ::read(fd_, &value, sizeof(value));
    }
  }

  uint32_t* futex_word() { return reinterpret_cast<uint32_t*>(&pushes_); }
  Errno wait_for_push(uint32_t seen) {
    const long r =
        ::syscall(SYS_futex, futex_word(), FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
    return r < 0 ? errno : 0;
  }

  std::mutex mutex_;
  std::deque<T> items_;
  int fd_ = -1;
  bool signalled_ = false;            // the eventfd counter is 1
  std::atomic<uint32_t> pushes_{0};   // bumped by every push(), under mutex_
  std::atomic<uint32_t> waiters_{0};  // pop() calls in FUTEX_WAIT
};

}  // namespace softverbs::provider
