// A FIFO of events behind an eventfd that poll()/epoll report readable
// exactly while the FIFO holds something: the file descriptor of a
// completion channel or of a context's async events.
//
// Invariant (under mutex_): the eventfd counter is 1 when items_ is non-empty
// and 0 when it is empty. push() writes only on the empty -> non-empty edge,
// and whoever empties the FIFO reads the counter back to 0, so neither ever
// blocks.
//
// Threads: push() may run on any thread, including the emulator's progress
// thread with the engine lock held (it only records and signals). pop() may
// block; it never holds mutex_ while waiting.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <deque>
#include <mutex>

#include "emulator/types.h"

namespace softverbs::provider {

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
    std::lock_guard lock(mutex_);
    try {
      items_.push_back(item);
    } catch (...) {
      return false;
    }
    if (items_.size() == 1) signal_locked();
    return true;
  }

  // Takes the oldest event; `on_pop(item)` runs before the lock is released,
  // so whoever purges events after it sees its effects. Waits while the FIFO
  // is empty, unless the application made fd() non-blocking (then EAGAIN),
  // like a read() of a kernel event file. Interrupted waits are resumed.
  template <class OnPop>
  Errno pop(T& out, OnPop&& on_pop) {
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (!items_.empty()) {
          out = items_.front();
          items_.pop_front();
          on_pop(out);
          if (items_.empty()) drain_locked();
          return 0;
        }
      }
      const int flags = ::fcntl(fd_, F_GETFL);
      if (flags < 0) return errno;
      if (flags & O_NONBLOCK) return EAGAIN;
      pollfd wait{fd_, POLLIN, 0};
      if (::poll(&wait, 1, -1) < 0 && errno != EINTR) return errno;
    }
  }

  template <class Pred>
  void remove_if(Pred&& pred) {
    std::lock_guard lock(mutex_);
    const bool had_items = !items_.empty();
    std::erase_if(items_, pred);
    if (had_items && items_.empty()) drain_locked();
  }

 private:
  void signal_locked() {
    const uint64_t one = 1;
    // Cannot fail: the counter is 0 here and eventfd accepts up to 2^64-2.
    [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof(one));
  }
  void drain_locked() {
    uint64_t value;
    // Cannot block: the counter is 1 here.
    [[maybe_unused]] ssize_t n = ::read(fd_, &value, sizeof(value));
  }

  std::mutex mutex_;
  std::deque<T> items_;
  int fd_ = -1;
};

}  // namespace softverbs::provider
