#include "emulator/sync/shared_lock_word.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

namespace softverbs::shared_lock_word {
namespace {

std::atomic_ref<uint32_t> ref(uint32_t& word) { return std::atomic_ref<uint32_t>(word); }

bool attempt(uint32_t& word) {
  uint32_t expected = 0;
  return ref(word).compare_exchange_strong(expected, self_tag(), std::memory_order_acquire,
                                           std::memory_order_relaxed);
}

// Above every pid Linux hands out (PID_MAX_LIMIT). A word holding such a
// value was written by no holder (a buggy or hostile process scribbled over
// the shared memory) and holds nothing; asked of kill(), 0xffffffff would
// even be -1, "every process", which always answers.
constexpr uint32_t kPidLimit = 1u << 22;

bool holder_gone(uint32_t holder) {
  if (holder == 0) return false;
  if (holder > kPidLimit) return true;
  return kill(static_cast<pid_t>(holder), 0) != 0 && errno == ESRCH;
}

// getpid() is a system call in glibc; the pid is kept, and forgotten in a
// forked child.
std::atomic<uint32_t> cached_pid{0};

void forget_pid() { cached_pid.store(0, std::memory_order_relaxed); }

}  // namespace

uint32_t self_tag() {
  uint32_t pid = cached_pid.load(std::memory_order_relaxed);
  if (pid != 0) return pid;
  static const int registered = pthread_atfork(nullptr, nullptr, forget_pid);
  (void)registered;
  pid = static_cast<uint32_t>(getpid());
  cached_pid.store(pid, std::memory_order_relaxed);
  return pid;
}

bool try_lock(uint32_t& word, uint32_t spins) {
  if (attempt(word)) return true;
  for (uint32_t i = 0; i < spins; ++i) {
    if (ref(word).load(std::memory_order_relaxed) == 0 && attempt(word)) return true;
  }
  return false;
}

void lock(uint32_t& word) {
  using namespace std::chrono_literals;
  for (uint32_t round = 0;; ++round) {
    if (try_lock(word, 64)) return;
    if (round < 16) {
      sched_yield();
      continue;
    }
    // Held for a while: by a process that still runs, or by none.
    uint32_t holder = ref(word).load(std::memory_order_relaxed);
    if (holder_gone(holder) &&
        ref(word).compare_exchange_strong(holder, self_tag(), std::memory_order_acquire,
                                          std::memory_order_relaxed))
      return;
    std::this_thread::sleep_for(50us);
  }
}

void unlock(uint32_t& word) { ref(word).store(0, std::memory_order_release); }

}  // namespace softverbs::shared_lock_word
