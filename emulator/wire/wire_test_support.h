// Helpers for the wire's multi-process tests: forked children under a
// watchdog, pipes to talk to them, a private segment prefix per test, and a
// look at /dev/shm.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "emulator/wire/shm_mailbox_layout.h"
#include "emulator/wire/shm_segment.h"

namespace softverbs::testing {

// Runs `body` in a forked child that an alarm() kills after
// `watchdog_seconds`, so a hang fails the test instead of stalling it. The
// child exits with body's return value (never returns into the test).
pid_t fork_child(const std::function<int()>& body, unsigned watchdog_seconds = 120);

// The same for the test process itself: kills it (SIGALRM) if the test is
// still running after `seconds`.
class Watchdog {
 public:
  explicit Watchdog(unsigned seconds);
  ~Watchdog();
};

// Reaps `pid`: its exit code, or 128 + the signal that killed it.
int wait_child(pid_t pid);

// A pipe carrying fixed-size values; both ends open in both processes.
class Pipe {
 public:
  Pipe();
  ~Pipe();
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;

  bool write_bytes(const void* data, size_t size);
  bool read_bytes(void* data, size_t size);  // blocks until all arrived
  template <typename T>
  bool write(const T& value) {
    return write_bytes(&value, sizeof(value));
  }
  template <typename T>
  bool read(T& value) {
    return read_bytes(&value, sizeof(value));
  }

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
};

// Points SOFTVERBS_SHM_PREFIX at a prefix no other test run uses and returns
// it; restores the previous value when destroyed.
class ScopedShmPrefix {
 public:
  ScopedShmPrefix();
  ~ScopedShmPrefix();
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  std::string previous_;
  bool had_previous_ = false;
};

// Names under /dev/shm that start with this user's stem for the current
// prefix ("<prefix>-<euid>-").
std::vector<std::string> segments_of_current_prefix();

// Removes them (cleanup after a failed test).
void remove_segments_of_current_prefix();

bool file_exists(const std::string& path);

// A mailbox segment mapped as plain memory, to play a peer that breaks the
// ring protocol: anything may be written anywhere in it.
class RawMailbox {
 public:
  // Maps segment `name` whole. false when it cannot.
  bool open(const std::string& name);

  MailboxHeader& header() const { return *reinterpret_cast<MailboxHeader*>(base()); }
  MailboxSlot& slot(uint64_t index) const;
  uint32_t slot_count() const { return slot_count_; }
  uint64_t enqueue_position() const { return header().enqueue_position.load(); }
  void set_enqueue_position(uint64_t position) { header().enqueue_position.store(position); }
  // The sequence word as the protocol means it (stored biased by the index).
  void set_sequence(uint64_t position, uint64_t sequence);

 private:
  uint8_t* base() const { return static_cast<uint8_t*>(segment_.address()); }
  ShmSegment segment_;
  uint32_t slot_count_ = 0;
};

// A frame's bytes as a function of its sequence number, so a receiver can
// check each one knowing only which number it expects next.
size_t frame_size_for(uint64_t sequence, size_t min_size, size_t max_size);
void fill_frame(uint64_t sequence, std::span<uint8_t> frame);
bool frame_matches(uint64_t sequence, std::span<const uint8_t> frame);

}  // namespace softverbs::testing
