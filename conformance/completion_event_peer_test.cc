// Completion events for messages from a peer process: a thread blocked in
// ibv_get_cq_event(3) is given the event of each SEND another process
// makes, and the message is intact. On a soft device between processes of
// one host, the frame wakes that very thread, which delivers it itself (one
// wake-up, not the progress thread's and then its own): the process's
// counters say so.
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "conformance/peer_pair.h"

namespace softverbs::conformance {
namespace {

constexpr uint64_t kMessages = 10;
constexpr uint32_t kLength = 64;
constexpr uint64_t kReceiveOffset = 4096;
// How long the peer waits before it sends: this thread is asleep by then.
constexpr auto kSendDelay = 20ms;
// A hang guard only.
constexpr auto kEventTimeout = 10s;

void on_guard_signal(int) {}

// Interrupts the calling thread's blocked ibv_get_cq_event with a signal
// (its handler installed without SA_RESTART: the call fails with EINTR)
// when the event has not come within kEventTimeout.
class BlockedWaitGuard {
 public:
  BlockedWaitGuard() : waiter_(pthread_self()) {
    struct sigaction action {};
    action.sa_handler = on_guard_signal;
    sigaction(SIGALRM, &action, &previous_);
    guard_ = std::thread([this] {
      std::unique_lock lock(mutex_);
      if (!done_cv_.wait_for(lock, kEventTimeout, [this] { return done_; }))
        pthread_kill(waiter_, SIGALRM);
    });
  }
  ~BlockedWaitGuard() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    done_cv_.notify_one();
    guard_.join();
    sigaction(SIGALRM, &previous_, nullptr);
  }

 private:
  pthread_t waiter_;
  struct sigaction previous_ {};
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread guard_;
};

std::optional<uint64_t> intake_by_event_waiter() {
  std::string stats;
  if (soft_control("stats", stats) != 0) return std::nullopt;
  return line_counter(stats, "engine:", "intake_by_event_waiter");
}

TEST(CompletionEventPeer, AThreadBlockedInGetCqEventIsGivenEachSendOfAPeerProcess) {
  PairOptions options = symmetric_options();
  options.local.recv_cq_on_channel = true;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                   const EndpointInfo&) {
    const std::optional<uint64_t> served_before = intake_by_event_waiter();
    for (uint64_t message = 1; message <= kMessages; ++message) {
      SCOPED_TRACE("message " + std::to_string(message));
      ASSERT_EQ(0, local.post_recv(RecvSpec{message, kReceiveOffset, kLength}));
      ASSERT_EQ(0, ibv_req_notify_cq(local.recv_cq(), 0));
      ASSERT_EQ(0, remote.fill(0, kLength, message)) << remote.why();
      std::atomic<Errno> sent{-1};
      std::thread sender([&] {
        std::this_thread::sleep_for(kSendDelay);
        SendSpec send;
        send.wr_id = message;
        send.length = kLength;
        sent.store(remote.post_send(send));
      });
      ibv_cq* cq = nullptr;
      void* cq_context = nullptr;
      int got;
      {
        BlockedWaitGuard guard;
        got = ibv_get_cq_event(local.recv_channel(), &cq, &cq_context);
      }
      sender.join();
      ASSERT_EQ(0, sent.load()) << remote.why();
      ASSERT_EQ(0, got) << "no completion event: " << describe_errno(errno);
      EXPECT_EQ(local.recv_cq(), cq);
      ibv_ack_cq_events(cq, 1);
      std::vector<ibv_wc> received;
      ASSERT_EQ(0, local.poll(Queue::kRecv, 1, received));
      expect_completion(received[0], message, IBV_WC_SUCCESS, "the SEND received");
      EXPECT_EQ(kLength, received[0].byte_len);
      EXPECT_FALSE(local.check(kReceiveOffset, kLength, message)) << "the SEND's bytes";
      std::vector<ibv_wc> done;
      ASSERT_EQ(0, remote.poll(Queue::kSend, 1, done)) << remote.why();
      expect_completion(done[0], message, IBV_WC_SUCCESS, "the SEND at the peer");
    }

    if (!served_before || peer_is_remote()) return;
    // Each SEND came while this thread slept: it was woken for the frame.
    // Allow for a few that came before it fell asleep (a loaded machine).
    const uint64_t served = intake_by_event_waiter().value_or(0) - *served_before;
    EXPECT_GE(served, kMessages / 2) << "SENDs delivered by the thread that waited for them";
  });
}

}  // namespace
}  // namespace softverbs::conformance
