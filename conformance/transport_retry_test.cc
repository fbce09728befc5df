// The transport timer (IBTA 9.7.6.1.3, C9-139..141; ibv_modify_qp(3)
// timeout and retry_cnt): a request that is never acknowledged is sent again
// each time the local ACK timeout, 4.096 us * 2^timeout, passes; after
// retry_cnt retries the WR completes with IBV_WC_RETRY_EXC_ERR and the QP
// enters ERR. Shown with every packet dropped (softverbs fault injection)
// and with a peer process killed in the middle of a transfer, after which
// other processes on the same device must still work.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint8_t kTimeout = 13;  // 4.096 us * 2^13 = 33.5 ms

std::chrono::microseconds local_ack_timeout(uint8_t timeout) {
  return std::chrono::microseconds((4096ull << timeout) / 1000);
}

// A generous ceiling, only to catch a timer that never fires: 20 times the
// expected time, and never less than two seconds.
std::chrono::microseconds generous_ceiling(std::chrono::microseconds expected) {
  return std::max<std::chrono::microseconds>(20 * expected, 2s);
}

std::string ms_text(std::chrono::microseconds us) {
  return std::to_string(us.count() / 1000.0) + " ms";
}

class RetryExhausted : public ::testing::TestWithParam<int> {};

// With every packet the requester sends dropped ("fault set drop:p=1" in its
// process), the SEND is sent retry_cnt + 1 times, each followed by a full
// local ACK timeout, so it cannot fail sooner than (retry_cnt + 1) * 4.096
// us * 2^timeout; then IBV_WC_RETRY_EXC_ERR, QP in ERR. The peer saw
// nothing and is unharmed.
TEST_P(RetryExhausted, AllPacketsDroppedEndsInRetryExcErrNoSoonerThanTheTimeoutsAllow) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  const auto retry_cnt = static_cast<uint8_t>(GetParam());
  RcParameters params;
  params.timeout = kTimeout;
  params.retry_cnt = retry_cnt;
  SoftControlReset reset(test_config().device_name);
  with_connected_pair(symmetric_options(params), [&](Endpoint& local, RemoteEndpoint& remote,
                                                     const EndpointInfo&) {
    ASSERT_EQ(0, remote.post_recv({40, 0, 4096})) << remote.why();
    std::string reply;
    ASSERT_EQ(0, soft_control("fault set drop:p=1", reply)) << reply;

    SendSpec send;
    send.wr_id = 1;
    send.length = 100;
    const auto start = Clock::now();
    ASSERT_EQ(0, local.post_send(send));
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
    const auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
    ASSERT_EQ(0, soft_control("fault clear", reply)) << reply;

    expect_completion(sent[0], 1, IBV_WC_RETRY_EXC_ERR, "the SEND that never got through");
    EXPECT_EQ(IBV_QPS_ERR, local.state()) << qp_state_name(local.state());
    const auto least = (retry_cnt + 1) * local_ack_timeout(kTimeout);
    EXPECT_GE(elapsed, least) << "failed after " << ms_text(elapsed) << "; " << int{retry_cnt} + 1
                              << " timeouts of " << ms_text(local_ack_timeout(kTimeout))
                              << " take at least " << ms_text(least);
    EXPECT_LE(elapsed, generous_ceiling(least)) << "failed only after " << ms_text(elapsed);

    std::string stats;
    ASSERT_EQ(0, soft_control("stats", stats));
    EXPECT_EQ(uint64_t{retry_cnt} + 1,
              qp_counter(stats, local.qp()->qp_num, "retransmit_timeouts").value_or(0))
        << stats;

    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 0, received)) << remote.why();
    EXPECT_TRUE(received.empty()) << describe_completion(received[0]);
    EXPECT_EQ(IBV_QPS_RTS, remote.state());
  });
}

INSTANTIATE_TEST_SUITE_P(RetryCounts, RetryExhausted, ::testing::Values(0, 3, 7),
                         [](const auto& info) { return "retry_cnt_" + std::to_string(info.param); });

// Two processes that neither of the earlier ones is: both ends driven
// remotely, a SEND and an RDMA WRITE between them, every byte checked.
void expect_two_new_processes_transfer() {
  constexpr uint32_t kSendLength = 65536 + 7;
  constexpr uint32_t kWriteLength = 1 << 20;
  const PairOptions options = symmetric_options();
  PeerOutcome first = run_with_endpoint_peer([&](PeerChannel& channel_a) {
    PeerOutcome second = run_with_endpoint_peer([&](PeerChannel& channel_b) {
      RemoteEndpoint a(channel_a), b(channel_b);
      EndpointInfo info_a, info_b;
      ASSERT_EQ(0, a.open(options.local, info_a)) << a.why();
      ASSERT_EQ(0, b.open(options.remote, info_b)) << b.why();
      ASSERT_EQ(0, b.connect(info_a, options.remote_params)) << b.why();
      ASSERT_EQ(0, a.connect(info_b, options.local_params)) << a.why();
      ASSERT_EQ(0, b.post_recv({1, 0, kSendLength})) << b.why();
      ASSERT_EQ(0, a.fill(0, kWriteLength, 99)) << a.why();
      SendSpec send;
      send.wr_id = 10;
      send.length = kSendLength;
      SendSpec write;
      write.wr_id = 11;
      write.opcode = IBV_WR_RDMA_WRITE;
      write.length = kWriteLength;
      ASSERT_EQ(0, a.post_send(send)) << a.why();
      std::vector<ibv_wc> done;
      ASSERT_EQ(0, a.poll(Queue::kSend, 1, done)) << a.why();
      expect_completion(done[0], 10, IBV_WC_SUCCESS, "SEND between the new processes");
      std::vector<ibv_wc> received;
      ASSERT_EQ(0, b.poll(Queue::kRecv, 1, received)) << b.why();
      expect_completion(received[0], 1, IBV_WC_SUCCESS, "its receive");
      EXPECT_EQ(kSendLength, received[0].byte_len);
      std::optional<ByteMismatch> wrong;
      ASSERT_EQ(0, b.check(0, kSendLength, 99, wrong)) << b.why();
      EXPECT_FALSE(wrong) << "SEND data " << describe_mismatch(*wrong);

      ASSERT_EQ(0, a.fill(0, kWriteLength, 123)) << a.why();
      ASSERT_EQ(0, a.post_send(write)) << a.why();
      done.clear();
      ASSERT_EQ(0, a.poll(Queue::kSend, 1, done)) << a.why();
      expect_completion(done[0], 11, IBV_WC_SUCCESS, "RDMA WRITE between the new processes");
      ASSERT_EQ(0, b.check(0, kWriteLength, 123, wrong)) << b.why();
      EXPECT_FALSE(wrong) << "RDMA WRITE data " << describe_mismatch(*wrong);
    });
    EXPECT_TRUE(second.passed) << "second new process: " << second.message;
  });
  EXPECT_TRUE(first.passed) << "first new process: " << first.message;
}

// IBTA 9.7.6.1.3 with a dead peer: the peer process is killed (SIGKILL)
// while RDMA WRITEs to it are outstanding. The survivor's first unfinished
// WR completes with IBV_WC_RETRY_EXC_ERR within what timeout and retry_cnt
// allow (generously bounded), the rest are flushed, all in order. Then two
// new processes on the same device transfer data as if nothing happened
// (DESIGN: "a process that dies leaves the others working").
TEST(PeerDeath, KilledPeerEndsInRetryExcErrAndTheDeviceKeepsWorking) {
  constexpr uint8_t kRetryCnt = 3;
  constexpr uint32_t kWriteLength = 1 << 20;
  constexpr uint64_t kWrites = 48;
  // Between hosts the ACK timer is the wall clock's (docs/faults.md), which
  // a loaded host (a sanitizer, busy neighbours) can starve the peer past:
  // a period long enough for that, 537 ms.
  const uint8_t timeout = peer_is_remote() ? 17 : kTimeout;
  RcParameters params;
  params.timeout = timeout;
  params.retry_cnt = kRetryCnt;
  PairOptions options = symmetric_options(params);
  options.local.max_send_wr = kWrites + 1;
  options.local.cq_depth = 2 * kWrites;

  const PeerOutcome peer = run_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                                           const EndpointInfo& info) {
    local.fill(0, kWriteLength, 8);
    for (uint64_t i = 0; i < kWrites; ++i) {
      SendSpec write;
      write.wr_id = 1 + i;
      write.opcode = IBV_WR_RDMA_WRITE;
      write.length = kWriteLength;
      ASSERT_EQ(0, local.post_send(write)) << "WRITE " << i;
    }
    std::vector<ibv_wc> completions;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, completions));
    expect_completion(completions[0], 1, IBV_WC_SUCCESS, "the first WRITE, before the kill");
    ASSERT_NO_FATAL_FAILURE(kill_peer(remote, info));
    const auto killed_at = Clock::now();
    // One more behind, so at least one WR is surely outstanding at the death.
    SendSpec last;
    last.wr_id = kWrites + 1;
    last.opcode = IBV_WR_RDMA_WRITE;
    last.length = kWriteLength;
    ASSERT_EQ(0, local.post_send(last));

    ASSERT_EQ(0, local.poll(Queue::kSend, kWrites, completions))
        << "got " << completions.size() << " of " << kWrites + 1 << " completions";
    const auto elapsed =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - killed_at);
    size_t i = 0;
    for (; i < completions.size() && completions[i].status == IBV_WC_SUCCESS; ++i) {
      EXPECT_EQ(1 + i, completions[i].wr_id) << describe_completion(completions[i]);
    }
    ASSERT_LT(i, completions.size()) << "every WRITE succeeded though the peer was killed";
    expect_completion(completions[i], 1 + i, IBV_WC_RETRY_EXC_ERR,
                      "the first WRITE the dead peer did not acknowledge");
    for (++i; i < completions.size(); ++i) {
      expect_completion(completions[i], 1 + i, IBV_WC_WR_FLUSH_ERR, "a WRITE behind it");
    }
    EXPECT_EQ(IBV_QPS_ERR, local.state()) << qp_state_name(local.state());
    // The death may fall anywhere in a retransmit period: allow one more.
    const auto expected = (kRetryCnt + 2) * local_ack_timeout(timeout);
    EXPECT_LE(elapsed, generous_ceiling(expected))
        << "RETRY_EXC_ERR came " << ms_text(elapsed) << " after the kill";
  });
  EXPECT_FALSE(peer.passed);
  // On another host the peer's end is only seen to close.
  if (!peer_is_remote())
    EXPECT_NE(std::string::npos, peer.message.find("signal 9")) << peer.message;
  if (::testing::Test::HasFailure()) return;

  expect_two_new_processes_transfer();
}

// The other side of the same rule: an HCA answers for its host whatever the
// host's CPUs do, so a peer process that does not run (stopped here with
// SIGSTOP, as a debugger or an overloaded machine stops it) for far longer
// than timeout and retry_cnt allow is not a lost peer. A SEND posted while
// it is stopped completes once it runs again, with no retry spent. (softverbs
// waits for a peer of its host that has not served what it was sent:
// docs/faults.md, "Timers and a peer that has not run"; SOFTVERBS_TIMERS=wall
// makes this test fail with IBV_WC_RETRY_EXC_ERR.) The SEND is longer than
// a packet: a SEND of one packet is placed in the peer's receive queue by
// its initiator (docs/architecture.md, "Placed SENDs") and completes at once,
// as on an HCA, with no timer to wait on.
TEST(PeerStopped, ASendToAStoppedPeerCompletesOnceItRunsAgain) {
  if (peer_is_remote()) GTEST_SKIP() << "stops its peer with a signal: a process of this host";
  constexpr uint8_t kShortTimeout = 8;  // 4.096 us * 2^8 = 1.05 ms
  constexpr uint8_t kRetryCnt = 1;
  constexpr auto kStopped = 300ms;      // 140 times what the timer allows
  constexpr uint32_t kLength = 6000;    // two packets at the largest MTU
  RcParameters params;
  params.timeout = kShortTimeout;
  params.retry_cnt = kRetryCnt;
  with_connected_pair(symmetric_options(params), [&](Endpoint& local, RemoteEndpoint& remote,
                                                     const EndpointInfo& info) {
    ASSERT_EQ(0, remote.post_recv({40, 0, 8192})) << remote.why();
    local.fill(0, kLength, 77);
    ASSERT_EQ(0, ::kill(info.pid, SIGSTOP));
    siginfo_t stopped{};
    ASSERT_EQ(0, waitid(P_PID, static_cast<id_t>(info.pid), &stopped, WSTOPPED | WNOWAIT))
        << std::strerror(errno);
    struct Resume {
      pid_t pid;
      ~Resume() { ::kill(pid, SIGCONT); }
    } resume{info.pid};

    SendSpec send;
    send.wr_id = 1;
    send.length = kLength;
    ASSERT_EQ(0, local.post_send(send));
    // Poll meanwhile, as a program waiting for its completion does: the
    // timer runs, and a kernel provider's responder may answer already.
    std::vector<ibv_wc> sent;
    const auto until = Clock::now() + kStopped;
    while (Clock::now() < until && sent.empty()) ASSERT_EQ(0, local.poll(Queue::kSend, 0, sent));
    if (sent.empty()) std::this_thread::sleep_until(until);
    ASSERT_EQ(0, ::kill(info.pid, SIGCONT));
    if (sent.empty()) ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
    expect_completion(sent[0], 1, IBV_WC_SUCCESS, "the SEND to the peer that was stopped");
    EXPECT_EQ(IBV_QPS_RTS, local.state()) << qp_state_name(local.state());

    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 40, IBV_WC_SUCCESS, "its receive");
    std::optional<ByteMismatch> wrong;
    ASSERT_EQ(0, remote.check(0, kLength, 77, wrong)) << remote.why();
    EXPECT_FALSE(wrong) << describe_mismatch(*wrong);

    std::string stats;
    if (soft_control_available() && soft_control("stats", stats) == 0) {
      EXPECT_EQ(0u, qp_counter(stats, local.qp()->qp_num, "retransmit_timeouts").value_or(1))
          << stats;
      EXPECT_GE(qp_counter(stats, local.qp()->qp_num, "retransmit_timeouts_waited").value_or(0),
                1u)
          << stats;
    }
  });
}

}  // namespace
}  // namespace softverbs::conformance
