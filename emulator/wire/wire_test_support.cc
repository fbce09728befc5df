#include "emulator/wire/wire_test_support.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "emulator/wire/shm_names.h"
#include "emulator/wire/shm_segment.h"

namespace softverbs::testing {

pid_t fork_child(const std::function<int()>& body, unsigned watchdog_seconds) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  alarm(watchdog_seconds);
  int code = 99;
  try {
    code = body();
  } catch (...) {
    code = 98;
  }
  _exit(code);  // no atexit handlers, no gtest teardown in the child
}

Watchdog::Watchdog(unsigned seconds) { alarm(seconds); }
Watchdog::~Watchdog() { alarm(0); }

int wait_child(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

Pipe::Pipe() {
  int fds[2] = {-1, -1};
  if (pipe(fds) == 0) {
    read_fd_ = fds[0];
    write_fd_ = fds[1];
  }
}

Pipe::~Pipe() {
  if (read_fd_ >= 0) close(read_fd_);
  if (write_fd_ >= 0) close(write_fd_);
}

bool Pipe::write_bytes(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (size != 0) {
    ssize_t n = ::write(write_fd_, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool Pipe::read_bytes(void* data, size_t size) {
  auto* bytes = static_cast<uint8_t*>(data);
  while (size != 0) {
    ssize_t n = ::read(read_fd_, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

ScopedShmPrefix::ScopedShmPrefix() {
  static std::atomic<unsigned> counter{0};
  if (const char* previous = std::getenv(kShmPrefixVariable)) {
    had_previous_ = true;
    previous_ = previous;
  }
  prefix_ = "svtest" + std::to_string(getpid()) + "n" + std::to_string(counter++);
  setenv(kShmPrefixVariable, prefix_.c_str(), 1);
}

ScopedShmPrefix::~ScopedShmPrefix() {
  if (had_previous_) {
    setenv(kShmPrefixVariable, previous_.c_str(), 1);
  } else {
    unsetenv(kShmPrefixVariable);
  }
}

std::vector<std::string> segments_of_current_prefix() {
  std::vector<std::string> names;
  const std::string stem = shm_user_stem();
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (dirent* entry = readdir(dir)) {
    if (std::strncmp(entry->d_name, stem.c_str(), stem.size()) == 0) names.push_back(entry->d_name);
  }
  closedir(dir);
  return names;
}

void remove_segments_of_current_prefix() {
  for (const std::string& name : segments_of_current_prefix()) unlink_segment("/" + name);
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool RawMailbox::open(const std::string& name) {
  if (ShmSegment::open_existing(name, segment_) != 0) return false;
  struct stat st;
  if (segment_.stat(st) != 0) return false;
  const auto size = static_cast<size_t>(st.st_size);
  if (size < mailbox_header_bytes() + kMailboxTargetAreaBytes) return false;
  if (segment_.map(size) != 0) return false;
  slot_count_ = static_cast<uint32_t>(
      (size - mailbox_header_bytes() - kMailboxTargetAreaBytes) / sizeof(MailboxSlot));
  return slot_count_ != 0;
}

MailboxSlot& RawMailbox::slot(uint64_t index) const {
  auto* slots = reinterpret_cast<MailboxSlot*>(base() + mailbox_header_bytes());
  return slots[index % slot_count_];
}

void RawMailbox::set_sequence(uint64_t position, uint64_t sequence) {
  std::atomic_ref<uint64_t>(slot(position).biased_sequence)
      .store(sequence - position % slot_count_);
}

size_t frame_size_for(uint64_t sequence, size_t min_size, size_t max_size) {
  // Spread over the whole range, with the extremes showing up regularly.
  if (sequence % 97 == 0) return max_size;
  if (sequence % 89 == 0) return min_size;
  return min_size + (sequence * 2654435761u) % (max_size - min_size + 1);
}

namespace {

uint8_t frame_seed(uint64_t sequence) {
  uint64_t x = sequence + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint8_t>(x ^ (x >> 31));
}

}  // namespace

void fill_frame(uint64_t sequence, std::span<uint8_t> frame) {
  const uint8_t seed = frame_seed(sequence);
  const auto length = static_cast<uint8_t>(frame.size());
  for (size_t i = 0; i < frame.size(); ++i) {
    frame[i] = static_cast<uint8_t>(seed + length + i * 131u);
  }
  // The sequence number itself, where it fits, so frames of equal size and
  // colliding seeds still differ.
  for (size_t i = 0; i < 8 && i < frame.size(); ++i) {
    frame[i] = static_cast<uint8_t>(sequence >> (8 * i));
  }
}

bool frame_matches(uint64_t sequence, std::span<const uint8_t> frame) {
  const uint8_t seed = frame_seed(sequence);
  const auto length = static_cast<uint8_t>(frame.size());
  for (size_t i = 0; i < 8 && i < frame.size(); ++i) {
    if (frame[i] != static_cast<uint8_t>(sequence >> (8 * i))) return false;
  }
  uint8_t mismatch = 0;
  for (size_t i = 8; i < frame.size(); ++i) {
    mismatch |= static_cast<uint8_t>(frame[i] ^ static_cast<uint8_t>(seed + length + i * 131u));
  }
  return mismatch == 0;
}

}  // namespace softverbs::testing
