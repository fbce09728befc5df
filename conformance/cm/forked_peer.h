// Processes for the CM tests, and the line between two of them.
//
// Every test body runs in a fresh process (run_in_fresh_process): librdmacm
// keeps each device it has used open for the life of a process, and a
// verbs context must not cross fork(), so the GoogleTest process itself
// never calls librdmacm and each test starts from a clean library. A test
// that needs a second process (a server, a group member) starts it with
// ForkedPeer from inside its body, before either side calls librdmacm.
//
// GoogleTest assertions work in every one of these processes: a failure is
// printed where it happens, and the process exits 1, which its parent
// reports as a failure of its own. Every process has a deadline (SIGALRM)
// and dies with its parent, so a hung test fails instead of hanging.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>

namespace softverbs::conformance::cm {

using namespace std::chrono_literals;

// How long one step of the other process may take (resolving, connecting,
// a transfer) before the waiting side gives up; generous, because the rxe
// guest runs under emulation.
inline constexpr std::chrono::milliseconds kStepTimeout = 20s;
inline constexpr std::chrono::seconds kPeerDeadline = 50s;
inline constexpr std::chrono::seconds kTestDeadline = 60s;

// A socketpair end shared by two processes of one test: values, text, and
// numbered steps ("I have listened", "I have disconnected").
class PeerLink {
 public:
  explicit PeerLink(int fd) : fd_(fd) {}
  ~PeerLink();
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  template <class T>
  ::testing::AssertionResult send(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    return send_bytes(&value, sizeof value);
  }
  // Fails on a short message, the peer's exit, or no message in `timeout`.
  template <class T>
  ::testing::AssertionResult receive(T& value, std::chrono::milliseconds timeout = kStepTimeout) {
    static_assert(std::is_trivially_copyable_v<T>);
    return receive_bytes(&value, sizeof value, timeout);
  }

  ::testing::AssertionResult send_text(const std::string& text);
  ::testing::AssertionResult receive_text(std::string& text,
                                          std::chrono::milliseconds timeout = kStepTimeout);

  // The peer reached `step`: what signal(step) on the other side sends.
  ::testing::AssertionResult signal(uint32_t step) { return send(step); }
  ::testing::AssertionResult wait_for(uint32_t step,
                                      std::chrono::milliseconds timeout = kStepTimeout);

 private:
  ::testing::AssertionResult send_bytes(const void* data, size_t length);
  ::testing::AssertionResult receive_bytes(void* data, size_t length,
                                           std::chrono::milliseconds timeout);

  int fd_;
};

// A body run in a child process, given its end of the link.
using PeerBody = std::function<void(PeerLink&)>;

class ForkedPeer {
 public:
  // Forks; the child runs `body` and exits 0 if it recorded no failure
  // (77 if it skipped). `role` names it in failure messages.
  ForkedPeer(std::string role, const PeerBody& body, std::chrono::seconds deadline = kPeerDeadline);
  // Kills a child that was not joined.
  ~ForkedPeer();
  ForkedPeer(const ForkedPeer&) = delete;
  ForkedPeer& operator=(const ForkedPeer&) = delete;

  PeerLink& link() { return *link_; }

  // Waits, at most `timeout`, for the child to exit; then kills it. Succeeds
  // if it exited 0.
  ::testing::AssertionResult join(std::chrono::milliseconds timeout = kStepTimeout);
  // Ends the child with SIGKILL, as a crash would, and reaps it.
  void kill_now();
  // The exit status join() saw (77: the child skipped).
  int exit_code() const { return exit_code_; }

 private:
  std::string role_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::unique_ptr<PeerLink> link_;
};

// Runs `body` in a fresh child process and makes the calling test fail (or
// skip) as the child did.
void run_in_fresh_process(const std::function<void()>& body,
                          std::chrono::seconds deadline = kTestDeadline);

}  // namespace softverbs::conformance::cm
