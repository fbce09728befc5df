#include "emulator/wire/fork_closed_fds.h"

#include <pthread.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <mutex>

namespace softverbs {
namespace {

constexpr int kNone = -1;

struct Slots {
  Slots() {
    for (auto& fd : fds) fd.store(kNone);
  }
  std::array<std::atomic<int>, 256> fds;
};

std::array<std::atomic<int>, 256>& slots() {
  static Slots registered;
  return registered.fds;
}

void close_registered_in_child() {
  for (auto& slot : slots()) {
    const int fd = slot.exchange(kNone);
    if (fd != kNone) close(fd);
  }
}

}  // namespace

void close_in_forked_child(int fd) {
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(nullptr, nullptr, close_registered_in_child); });
  for (auto& slot : slots()) {
    int expected = kNone;
    if (slot.compare_exchange_strong(expected, fd)) return;
  }
}

void keep_in_forked_child(int fd) {
  for (auto& slot : slots()) {
    int expected = fd;
    if (slot.compare_exchange_strong(expected, kNone)) return;
  }
}

}  // namespace softverbs
