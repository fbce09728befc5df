#include "emulator/sync/shared_lock_word.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

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

// Fields of /proc/PID/stat after the command name: the state is the first,
// the start time (clock ticks after boot) the 20th.
struct ProcessStat {
  char state = '?';
  unsigned long long start_time = 0;
};

std::optional<ProcessStat> read_stat(const char* path) {
  char text[1024];
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return std::nullopt;
  text[n] = '\0';
  const char* after_name = std::strrchr(text, ')');
  if (!after_name) return std::nullopt;
  ProcessStat stat;
  unsigned long long start_time = 0;
  // state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
  // utime stime cutime cstime priority nice threads itrealvalue starttime
  if (std::sscanf(after_name + 1,
                  " %c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                  &stat.state, &start_time) != 2)
    return std::nullopt;
  stat.start_time = start_time;
  return stat;
}

uint32_t start_time_bits(unsigned long long start_time) {
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

// A process in state Z is a zombie only when no thread of it runs: one
// whose first thread called pthread_exit() shows Z too while the others
// run, and lists them in its task directory.
bool only_its_first_thread_left(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/task", int(pid));
  DIR* tasks = opendir(path);
  if (!tasks) return true;
  int threads = 0;
  while (const dirent* entry = readdir(tasks))
    if (entry->d_name[0] != '.') ++threads;
  closedir(tasks);
  return threads <= 1;
}

bool holder_gone(uint32_t holder) {
  if (holder == 0) return false;
  const pid_t pid = static_cast<pid_t>(holder & kPidMask);
  // No holder writes pid 0; garbage another process scribbled does.
  if (pid == 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  if (!proc_is_ours()) return false;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", int(pid));
  const std::optional<ProcessStat> stat = read_stat(path);
  if (!stat) return true;  // gone since kill() looked
  // A killed holder its parent has not reaped yet holds nothing either; and
  // a process started after the holder died only took over its pid.
  if (start_time_bits(stat->start_time) != holder >> kPidBits) return true;
  return stat->state == 'X' || (stat->state == 'Z' && only_its_first_thread_left(pid));
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
  if (proc_is_ours()) {
    if (const std::optional<ProcessStat> stat = read_stat("/proc/self/stat"))
      tag |= start_time_bits(stat->start_time) << kPidBits;
  }
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
