#include "emulator/wire/process_identity.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <string>
#include <string_view>

namespace softverbs {
namespace {

// Reads a small /proc file into `buffer`; returns its length or -errno.
ssize_t read_small_file(const char* path, char* buffer, size_t capacity) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t total = 0;
  while (static_cast<size_t>(total) < capacity) {
    ssize_t n = read(fd, buffer + total, capacity - static_cast<size_t>(total));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      return -err;
    }
    if (n == 0) break;
    total += n;
  }
  close(fd);
  return total;
}

// A process whose first thread called pthread_exit() shows state Z while
// its other threads run: it is a zombie only when its task directory lists
// no thread but that first one.
bool other_threads_run(const std::string& process) {
  DIR* tasks = opendir((process + "/task").c_str());
  if (!tasks) return false;
  int threads = 0;
  while (const dirent* entry = readdir(tasks))
    if (entry->d_name[0] != '.') ++threads;
  closedir(tasks);
  return threads > 1;
}

std::atomic<pid_t> g_own_pid{0};

}  // namespace

pid_t own_pid() {
  const pid_t kept = g_own_pid.load(std::memory_order_relaxed);
  if (kept != 0) return kept;
  static const int registered =
      pthread_atfork(nullptr, nullptr, [] { g_own_pid.store(0, std::memory_order_relaxed); });
  (void)registered;
  const pid_t pid = getpid();
  g_own_pid.store(pid, std::memory_order_relaxed);
  return pid;
}

Errno read_process_start_time(pid_t pid, uint64_t& start_time) {
  const std::string process = pid == own_pid() ? std::string("/proc/self")
                                              : "/proc/" + std::to_string(pid);
  const std::string path = process + "/stat";
  char buffer[1024];
  ssize_t length = read_small_file(path.c_str(), buffer, sizeof(buffer));
  // A process reaped between open() and read() makes read() fail with ESRCH.
  if (length == -ESRCH) return ENOENT;
  if (length < 0) return static_cast<Errno>(-length);
  std::string_view stat(buffer, static_cast<size_t>(length));
  // Field 2 (comm) is in parentheses and may itself hold spaces and ')'; the
  // fields after the last ')' are plain numbers and letters.
  size_t close_paren = stat.rfind(')');
  if (close_paren == std::string_view::npos) return EIO;
  std::string_view rest = stat.substr(close_paren + 1);
  // rest = " <state:3> <ppid:4> ... <starttime:22> ..."
  int field = 2;
  size_t pos = 0;
  while (pos < rest.size()) {
    while (pos < rest.size() && rest[pos] == ' ') ++pos;
    size_t end = rest.find(' ', pos);
    if (end == std::string_view::npos) end = rest.size();
    ++field;
    std::string_view token = rest.substr(pos, end - pos);
    if (field == 3 && (token == "X" || token == "x")) return ESRCH;
    if (field == 3 && token == "Z" && !other_threads_run(process)) return ESRCH;
    if (field == 22) {
      uint64_t value = 0;
      auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
      if (ec != std::errc()) return EIO;
      start_time = value;
      return 0;
    }
    pos = end;
  }
  return EIO;
}

uint64_t own_start_time() {
  uint64_t start_time = 0;
  if (read_process_start_time(getpid(), start_time) != 0) return 0;
  return start_time;
}

bool is_process_alive(pid_t pid, uint64_t start_time) {
  if (pid <= 0) return false;
  // EPERM means a process exists but belongs to another user: that can only be
  // a reused pid, which the start time below tells apart anyway.
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  uint64_t current = 0;
  Errno err = read_process_start_time(pid, current);
  if (err == ENOENT || err == ESRCH) return false;
  if (err != 0 || start_time == 0) return true;  // /proc hidden from us: trust kill()
  return current == start_time;
}

}  // namespace softverbs
