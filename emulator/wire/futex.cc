#include "emulator/wire/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

}  // namespace softverbs
