#include "emulator/wire/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace softverbs {
namespace {

uint32_t* futex_address(std::atomic<uint32_t>& word) {
  // std::atomic<uint32_t> is lock-free and has the layout of a uint32_t, which
  // is what the kernel compares against.
  return reinterpret_cast<uint32_t*>(&word);
}

}  // namespace

void futex_wait_shared(std::atomic<uint32_t>& word, uint32_t expected, uint64_t timeout_ns) {
  struct timespec timeout;
  struct timespec* timeout_arg = nullptr;
  if (timeout_ns != 0) {
    timeout.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000u);
    timeout.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000u);
    timeout_arg = &timeout;
  }
  syscall(SYS_futex, futex_address(word), FUTEX_WAIT, expected, timeout_arg, nullptr, 0);
}

void futex_wake_shared(std::atomic<uint32_t>& word, int count) {
  syscall(SYS_futex, futex_address(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

int futex_wait_either(std::atomic<uint32_t>& own, uint32_t own_expected,
                      std::atomic<uint32_t>& shared, uint32_t shared_expected) {
  futex_waitv words[2] = {};
  words[0].uaddr = reinterpret_cast<uintptr_t>(futex_address(own));
  words[0].val = own_expected;
  words[0].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
  words[1].uaddr = reinterpret_cast<uintptr_t>(futex_address(shared));
  words[1].val = shared_expected;
  words[1].flags = FUTEX_32;
  // No timeout: as FUTEX_WAIT without one, a signal ends the wait with
  // ERESTARTSYS, which SA_RESTART turns into a restart.
  if (syscall(SYS_futex_waitv, words, 2, 0, nullptr, CLOCK_MONOTONIC) >= 0) return 0;
  return errno;
}

bool futex_wait_either_available() {
  // An empty vector is refused with EINVAL by a kernel that has the call.
  static const bool available =
      syscall(SYS_futex_waitv, nullptr, 0, 0, nullptr, CLOCK_MONOTONIC) < 0 && errno == EINVAL;
  return available;
}

}  // namespace softverbs
