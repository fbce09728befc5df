#include "emulator/sync/shared_lock_word.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "emulator/wire/process_identity.h"

namespace softverbs::shared_lock_word {
namespace {

std::atomic_ref<uint32_t> ref(uint32_t& word) { return std::atomic_ref<uint32_t>(word); }

bool attempt(uint32_t& word) {
  uint32_t expected = 0;
  return ref(word).compare_exchange_strong(expected, self_tag(), std::memory_order_acquire,
                                           std::memory_order_relaxed);
}

// A holder's tag: its pid in the low 22 bits (PID_MAX_LIMIT is 2^22), and
// 10 bits of a hash of its start time above, so that a pid the kernel has
// handed to a new process since the holder died (pid_max is often 32768)
// does not keep the lock held for ever.
constexpr uint32_t kPidBits = 22;
constexpr uint32_t kPidMask = (1u << kPidBits) - 1;

uint32_t start_time_bits(uint64_t start_time) {
  return static_cast<uint32_t>((start_time * 0x9E3779B97F4A7C15ull) >> (64 - (32 - kPidBits)));
}

// /proc names processes by this process's pids only when it was mounted for
// our pid namespace; otherwise (a namespace without its own /proc) a pid
// there names another process, and only kill() can be asked.
bool proc_is_ours() {
  static const bool ours = [] {
    char self[64];
    const ssize_t n = readlink("/proc/self", self, sizeof self - 1);
    if (n <= 0) return false;
    self[n] = '\0';
    return std::strtol(self, nullptr, 10) == getpid();
  }();
  return ours;
}

bool holder_gone(uint32_t holder) {
  if (holder == 0) return false;
  const pid_t pid = static_cast<pid_t>(holder & kPidMask);
  // No holder writes pid 0; garbage another process scribbled does.
  if (pid == 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  if (!proc_is_ours()) return false;
  // Gone as well: a zombie its parent has not reaped (it answers kill()),
  // and a process started after the holder died that only took its pid.
  uint64_t start_time = 0;
  const Errno err = read_process_start_time(pid, start_time);
  if (err == ENOENT || err == ESRCH) return true;
  if (err != 0) return false;  // /proc unreadable: kill() said it runs
  return start_time_bits(start_time) != holder >> kPidBits;
}

// getpid() is a system call in glibc; the tag is kept, and forgotten in a
// forked child.
std::atomic<uint32_t> cached_tag{0};

void forget_tag() { cached_tag.store(0, std::memory_order_relaxed); }

}  // namespace

uint32_t self_tag() {
  uint32_t tag = cached_tag.load(std::memory_order_relaxed);
  if (tag != 0) return tag;
  static const int registered = pthread_atfork(nullptr, nullptr, forget_tag);
  (void)registered;
  tag = static_cast<uint32_t>(getpid()) & kPidMask;
  if (proc_is_ours()) tag |= start_time_bits(own_start_time()) << kPidBits;
  cached_tag.store(tag, std::memory_order_relaxed);
  return tag;
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
