// Completion channels and completion events: ibv_create_comp_channel(3),
// ibv_req_notify_cq(3), ibv_get_cq_event(3), ibv_ack_cq_events(3). The IBTA
// Request Completion Notification verb: an armed CQ generates one event for
// its next completion (next solicited completion when armed with
// solicited_only); an unarmed CQ generates none; arming is one-shot.
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>
#include <vector>

#include "conformance/device_fixture.h"
#include "harness/testsupport/completion_polling.h"
#include "harness/testsupport/registered_buffer.h"

namespace softverbs::conformance {
namespace {

// How long to wait for an event that must come: a hang guard only.
constexpr int kEventTimeoutMs = 10'000;
// How long to give an event that must not come the chance to show up.
constexpr int kNoEventGraceMs = 100;

bool fd_readable(int fd, int timeout_ms) {
  pollfd pfd{fd, POLLIN, 0};
  return ::poll(&pfd, 1, timeout_ms) == 1 && (pfd.revents & POLLIN);
}

class CompletionChannel : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (HasFatalFailure()) return;
    pd_ = alloc_pd();
    ASSERT_TRUE(pd_);
    channel_.reset(ibv_create_comp_channel(context()));
    ASSERT_TRUE(channel_) << describe_errno(errno);
    send_cq_ = create_cq(16);
    ASSERT_TRUE(send_cq_);
    recv_cq_ = create_cq(16, channel_.get(), &cq_context_marker_);
    ASSERT_TRUE(recv_cq_) << describe_errno(last_error_);
    EXPECT_EQ(channel_.get(), recv_cq_->channel);
    EXPECT_EQ(&cq_context_marker_, recv_cq_->cq_context);
    sender_ = create_qp(pd_.get(), send_cq_.get(), send_cq_.get());
    receiver_ = create_qp(pd_.get(), send_cq_.get(), recv_cq_.get());
    ASSERT_TRUE(sender_ && receiver_) << describe_errno(last_error_);
    ASSERT_EQ(0, connect_pair(sender_.get(), receiver_.get()));
    ASSERT_EQ(0, buffer_.allocate(pd_.get(), 4096, IBV_ACCESS_LOCAL_WRITE));
  }

  void TearDown() override {
    // ibv_destroy_cq waits until every event it handed out is acknowledged.
    if (unacked_events_) ibv_ack_cq_events(recv_cq_.get(), unacked_events_);
  }

  // Sends one message to the receiver QP and waits for the sender's
  // completion (not the receiver's: that one is what the test watches).
  void send_message(bool solicited) {
    ibv_sge recv_sge{buffer_.address() + 2048, 64, buffer_.lkey()};
    ibv_recv_wr recv{};
    recv.wr_id = ++messages_;
    recv.sg_list = &recv_sge;
    recv.num_sge = 1;
    ibv_recv_wr* bad_recv = nullptr;
    ASSERT_EQ(0, ibv_post_recv(receiver_.get(), &recv, &bad_recv));

    ibv_sge send_sge{buffer_.address(), 64, buffer_.lkey()};
    ibv_send_wr send{};
    send.wr_id = messages_;
    send.sg_list = &send_sge;
    send.num_sge = 1;
    send.opcode = IBV_WR_SEND;
    send.send_flags = IBV_SEND_SIGNALED | (solicited ? IBV_SEND_SOLICITED : 0);
    ibv_send_wr* bad_send = nullptr;
    ASSERT_EQ(0, ibv_post_send(sender_.get(), &send, &bad_send));
    std::vector<ibv_wc> wcs;
    ASSERT_EQ(0, poll_completions(send_cq_.get(), 1, wcs));
    ASSERT_EQ(IBV_WC_SUCCESS, wcs[0].status) << describe_completion(wcs[0]);
  }

  // Takes the receive completion of the last message off the CQ.
  void expect_receive_completion() {
    std::vector<ibv_wc> wcs;
    ASSERT_EQ(0, poll_completions(recv_cq_.get(), 1, wcs));
    EXPECT_EQ(IBV_WC_SUCCESS, wcs[0].status) << describe_completion(wcs[0]);
    EXPECT_EQ(messages_, wcs[0].wr_id);
  }

  // Waits for the channel fd, then reads the event and acknowledges it.
  void expect_event() {
    ASSERT_TRUE(fd_readable(channel_->fd, kEventTimeoutMs)) << "no completion event";
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    ASSERT_EQ(0, ibv_get_cq_event(channel_.get(), &cq, &cq_context));
    ++unacked_events_;
    EXPECT_EQ(recv_cq_.get(), cq);
    EXPECT_EQ(&cq_context_marker_, cq_context);
    ibv_ack_cq_events(recv_cq_.get(), 1);
    --unacked_events_;
  }

  void expect_no_event() {
    EXPECT_FALSE(fd_readable(channel_->fd, kNoEventGraceMs)) << "unexpected completion event";
  }

  int cq_context_marker_ = 0;
  unsigned unacked_events_ = 0;
  uint64_t messages_ = 0;
  PdPtr pd_;
  CompChannelPtr channel_;  // destroyed after the CQ that uses it
  CqPtr send_cq_;
  CqPtr recv_cq_;
  QpPtr sender_;
  QpPtr receiver_;
  RegisteredBuffer buffer_;
};

// ibv_req_notify_cq(cq, 0) then a completion: the channel's fd becomes
// readable and ibv_get_cq_event returns the CQ and its cq_context.
TEST_F(CompletionChannel, ArmedCqMakesTheChannelFdReadableAndReportsCqAndContext) {
  ASSERT_EQ(0, ibv_req_notify_cq(recv_cq_.get(), 0));
  ASSERT_NO_FATAL_FAILURE(send_message(false));
  ASSERT_NO_FATAL_FAILURE(expect_event());
  expect_receive_completion();
  // One arming, one completion: one event.
  expect_no_event();
}

// Without ibv_req_notify_cq, a completion produces no event.
TEST_F(CompletionChannel, UnarmedCqProducesNoEvent) {
  ASSERT_NO_FATAL_FAILURE(send_message(false));
  expect_receive_completion();
  expect_no_event();
}

// An arming covers one event: the next completion after it needs a new
// ibv_req_notify_cq; after re-arming, events come again.
TEST_F(CompletionChannel, ArmingIsOneShot) {
  ASSERT_EQ(0, ibv_req_notify_cq(recv_cq_.get(), 0));
  ASSERT_NO_FATAL_FAILURE(send_message(false));
  ASSERT_NO_FATAL_FAILURE(expect_event());
  expect_receive_completion();

  ASSERT_NO_FATAL_FAILURE(send_message(false));
  expect_receive_completion();
  expect_no_event();

  ASSERT_EQ(0, ibv_req_notify_cq(recv_cq_.get(), 0));
  ASSERT_NO_FATAL_FAILURE(send_message(false));
  ASSERT_NO_FATAL_FAILURE(expect_event());
  expect_receive_completion();
}

// ibv_req_notify_cq(cq, 1): only a solicited completion (a message sent
// with IBV_SEND_SOLICITED, the BTH SE bit) produces the event.
TEST_F(CompletionChannel, SolicitedOnlyArmingWaitsForASolicitedCompletion) {
  ASSERT_EQ(0, ibv_req_notify_cq(recv_cq_.get(), 1));
  ASSERT_NO_FATAL_FAILURE(send_message(false));
  expect_receive_completion();
  expect_no_event();

  ASSERT_NO_FATAL_FAILURE(send_message(true));
  ASSERT_NO_FATAL_FAILURE(expect_event());
  expect_receive_completion();
}

// A blocking ibv_get_cq_event is, in libibverbs, a read() of the channel's
// event file: a signal whose handler was installed without SA_RESTART ends
// it with -1 and errno EINTR (qperf ends its measurement loops that way:
// SIGALRM, then it looks at its "time is up" flag); after a handler with
// SA_RESTART it goes on waiting.
std::atomic<int> g_alarms{0};
void count_alarm(int) { g_alarms.fetch_add(1); }

class AlarmHandler {
 public:
  explicit AlarmHandler(int sa_flags) {
    struct sigaction action {};
    action.sa_handler = count_alarm;
    action.sa_flags = sa_flags;
    sigemptyset(&action.sa_mask);
    sigaction(SIGALRM, &action, &previous_);
    g_alarms = 0;
  }
  ~AlarmHandler() {
    itimerval off{};
    setitimer(ITIMER_REAL, &off, nullptr);
    sigaction(SIGALRM, &previous_, nullptr);
  }
  void ring_in(std::chrono::microseconds delay) {
    itimerval once{};
    once.it_value.tv_sec = delay.count() / 1'000'000;
    once.it_value.tv_usec = delay.count() % 1'000'000;
    setitimer(ITIMER_REAL, &once, nullptr);
  }

 private:
  struct sigaction previous_ {};
};

TEST_F(CompletionChannel, SignalWithoutSaRestartEndsABlockedGetCqEventWithEintr) {
  ASSERT_EQ(0, ibv_req_notify_cq(recv_cq_.get(), 0));
  AlarmHandler alarm(0);
  alarm.ring_in(std::chrono::milliseconds(50));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  errno = 0;
  EXPECT_EQ(-1, ibv_get_cq_event(channel_.get(), &cq, &cq_context));
  EXPECT_EQ(EINTR, errno) << describe_errno(errno);
  EXPECT_EQ(1, g_alarms.load());
}

TEST_F(CompletionChannel, SignalWithSaRestartLetsABlockedGetCqEventWaitOn) {
  ASSERT_EQ(0, ibv_req_notify_cq(recv_cq_.get(), 0));
  AlarmHandler alarm(SA_RESTART);
  // The message comes from another thread once the signal has been handled;
  // that thread blocks SIGALRM, so the signal interrupts this one.
  sigset_t alarm_only, previous;
  sigemptyset(&alarm_only);
  sigaddset(&alarm_only, SIGALRM);
  pthread_sigmask(SIG_BLOCK, &alarm_only, &previous);
  std::thread sender([this] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (g_alarms.load() == 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    send_message(false);
  });
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  alarm.ring_in(std::chrono::milliseconds(20));
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  const int got = ibv_get_cq_event(channel_.get(), &cq, &cq_context);
  const int err = errno;
  sender.join();
  ASSERT_EQ(0, got) << describe_errno(err);
  ++unacked_events_;
  EXPECT_EQ(recv_cq_.get(), cq);
  EXPECT_EQ(1, g_alarms.load());
  ibv_ack_cq_events(recv_cq_.get(), 1);
  --unacked_events_;
  expect_receive_completion();
}

}  // namespace
}  // namespace softverbs::conformance
