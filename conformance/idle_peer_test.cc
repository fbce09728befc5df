// A peer process that polled its CQ, found nothing, and went on to other
// work (here: waiting for this test's next request, calling no verb) still
// answers: an HCA receives a SEND, and acknowledges it, without the
// program's CPU. softverbs serves the frames of a process whose threads
// poll from those threads; once they stop, its progress thread takes over
// (docs/architecture.md, "Polling threads").
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "conformance/peer_pair.h"

namespace softverbs::conformance {
namespace {

using namespace std::chrono_literals;

// A guard against a hang: the messages are acknowledged long before.
constexpr auto kAnswerTimeout = 5000ms;

TEST(IdlePeer, SendsToAPeerThatPolledAndWentIdleAreReceivedAndAcknowledged) {
  with_connected_pair(symmetric_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                               const EndpointInfo&) {
    for (uint64_t round = 0; round < 3; ++round) {
      ASSERT_EQ(0, remote.post_recv(RecvSpec{round, 4096, 64})) << remote.why();
      // The peer polls for a while, finds nothing, and stops polling.
      std::vector<ibv_wc> received;
      ASSERT_EQ(ETIMEDOUT, remote.poll(Queue::kRecv, 1, received, 20ms)) << remote.why();

      local.fill(0, 64, 7 + round);
      SendSpec send;
      send.wr_id = 100 + round;
      send.length = 64;
      const auto posted = std::chrono::steady_clock::now();
      ASSERT_EQ(0, local.post_send(send));
      std::vector<ibv_wc> done;
      ASSERT_EQ(0, local.poll(Queue::kSend, 1, done, kAnswerTimeout))
          << "the idle peer never acknowledged the SEND";
      const auto took = std::chrono::steady_clock::now() - posted;
      expect_completion(done[0], 100 + round, IBV_WC_SUCCESS, "the SEND");

      // Only now does the peer look again: the message is there, intact.
      ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
      expect_completion(received[0], round, IBV_WC_SUCCESS, "the receive at the peer");
      std::optional<ByteMismatch> mismatch;
      ASSERT_EQ(0, remote.check(4096, 64, 7 + round, mismatch)) << remote.why();
      EXPECT_FALSE(mismatch) << "the message at the peer";
      RecordProperty("acknowledged_after_us_round_" + std::to_string(round),
                     std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(took).count()));
    }
  });
}

}  // namespace
}  // namespace softverbs::conformance
