// ACKs coalesced over one pass of intake (ack_batch.h): a batch of messages
// served together is acknowledged once, at most every 16 messages, and the
// held ACK goes before any other answer of the responder, and before the
// completion events of the pass.
#include <functional>
#include <initializer_list>

#include "emulator/transport/ack_batch.h"
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

class AckCoalescing : public Transport {
 protected:
  // Posts `count` 8-byte SENDs (and as many receives), nothing served yet.
  void post_sends(Endpoint& a, Endpoint& b, uint64_t count) {
    for (uint64_t i = 0; i < count; ++i) {
      Sge r = sge(b, i * 8, 8);
      ASSERT_EQ(b.qp->post_recv({i, {&r, 1}}), 0);
      Sge s = sge(a, i * 8, 8);
      ASSERT_EQ(a.qp->post_send(send_of(i, s)), 0);
    }
  }
  std::vector<uint32_t> ack_psns() const {
    std::vector<uint32_t> psns;
    for (const Sent& f : sent_)
      if (f.opcode == Opcode::kRcAcknowledge) psns.push_back(f.psn);
    return psns;
  }
  // The next completions of a's send CQ are successes, of these WRs in order.
  void expect_successes(Endpoint& a, std::initializer_list<uint64_t> wr_ids) {
    Completion c;
    for (uint64_t id : wr_ids) {
      ASSERT_TRUE(poll_one(*a.send_cq, c)) << id;
      EXPECT_EQ(c.wr_id, id);
      EXPECT_EQ(c.status, WcStatus::kSuccess);
    }
  }
  void expect_sends_complete(Endpoint& a, Endpoint& b, uint64_t count) {
    run_until_idle();
    Completion c;
    for (uint64_t i = 0; i < count; ++i) {
      ASSERT_TRUE(poll_one(*b.recv_cq, c)) << i;
      EXPECT_EQ(c.wr_id, i);
      EXPECT_EQ(c.status, WcStatus::kSuccess);
      ASSERT_TRUE(poll_one(*a.send_cq, c)) << i;
      EXPECT_EQ(c.wr_id, i);
      EXPECT_EQ(c.status, WcStatus::kSuccess);
    }
    EXPECT_FALSE(poll_one(*a.send_cq, c, 3));
  }
};

TEST_F(AckCoalescing, MessagesServedInOnePassAreAcknowledgedOnce) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 100, 500);
  post_sends(a, b, 5);
  engine_->progress();  // the five SENDs, in one pass
  EXPECT_EQ(ack_psns(), std::vector<uint32_t>{104});
  expect_sends_complete(a, b, 5);
  EXPECT_EQ(ack_psns(), std::vector<uint32_t>{104});
}

TEST_F(AckCoalescing, OneAckStandsForSixteenMessagesAtMost) {
  Endpoint a = make_endpoint(4096, 1, 64), b = make_endpoint(4096, 1, 64);
  connect(a, b, 0, 0);
  post_sends(a, b, 40);
  engine_->progress();
  EXPECT_EQ(ack_psns(), (std::vector<uint32_t>{15, 31, 39}));
  expect_sends_complete(a, b, 40);
}

TEST_F(AckCoalescing, TheHeldAckGoesBeforeAReadResponse) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 7, 7);
  post_sends(a, b, 2);
  Sge r = sge(a, 2048, 64);
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaRead, 9, r, b, 1024)), 0);
  engine_->progress();
  // SEND 7, SEND 8, READ request 9, then the answers: the ACK of 8 first.
  ASSERT_EQ(sent_.size(), 5u);
  EXPECT_EQ(sent_[3].opcode, Opcode::kRcAcknowledge);
  EXPECT_EQ(sent_[3].psn, 8u);
  EXPECT_EQ(sent_[4].opcode, Opcode::kRcReadResponseOnly);
  EXPECT_EQ(sent_[4].psn, 9u);
  run_until_idle();
  ASSERT_NO_FATAL_FAILURE(expect_successes(a, {0, 1, 9}));
}

TEST_F(AckCoalescing, TheHeldAckGoesBeforeANak) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 20, 20);
  // The third SEND finds a receive too short for it: a NAK, and b fails.
  for (uint64_t i = 0; i < 3; ++i) {
    Sge r = sge(b, i * 8, i < 2 ? 8u : 4u);
    ASSERT_EQ(b.qp->post_recv({i, {&r, 1}}), 0);
    Sge s = sge(a, i * 8, 8);
    ASSERT_EQ(a.qp->post_send(send_of(i, s)), 0);
  }
  engine_->progress();
  ASSERT_EQ(sent_.size(), 5u);
  EXPECT_EQ(sent_[3].opcode, Opcode::kRcAcknowledge);
  EXPECT_EQ(sent_[3].psn, 21u);
  EXPECT_EQ(aeth::kind(sent_[3].syndrome), aeth::Kind::kAck);
  EXPECT_EQ(sent_[4].opcode, Opcode::kRcAcknowledge);
  EXPECT_EQ(sent_[4].psn, 22u);
  EXPECT_EQ(aeth::kind(sent_[4].syndrome), aeth::Kind::kNak);
  run_until_idle();
  ASSERT_NO_FATAL_FAILURE(expect_successes(a, {0, 1}));
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.status, WcStatus::kRemInvReqErr);
}

// The receiver's application may see a completion while the ACK for it is
// still held (the batch goes on serving other frames), and move the QP to
// ERR at once, as rdma_disconnect does. The ACK goes before the QP stops
// answering: the requester's message was delivered, and must complete.
TEST_F(AckCoalescing, AQpMovedToErrorSendsTheAckItHoldsFirst) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 30, 30);
  post_sends(a, b, 2);
  {
    AckBatch still_serving;  // the pass of intake has not ended yet
    engine_->progress();
    EXPECT_TRUE(ack_psns().empty());
    Completion c;
    ASSERT_TRUE(poll_one(*b.recv_cq, c));
    ASSERT_TRUE(poll_one(*b.recv_cq, c));
    QpAttributes to_error;
    to_error.state = QpState::kErr;
    ASSERT_EQ(b.qp->modify(to_error, kQpAttrState), 0);
    EXPECT_EQ(ack_psns(), std::vector<uint32_t>{31});
  }
  EXPECT_EQ(ack_psns(), std::vector<uint32_t>{31});  // the batch's end adds none
  run_until_idle();
  ASSERT_NO_FATAL_FAILURE(expect_successes(a, {0, 1}));
}

// The application woken by a completion event may answer at once; its
// answer must not overtake the ACK of what it received, which an HCA sends
// as it takes the message.
TEST_F(AckCoalescing, TheCompletionEventOfAMessageComesAfterItsAck) {
  struct AcksAtEvent final : CompletionEventSink {
    std::function<size_t()> acks_now;
    std::vector<size_t> acks_sent;
    void on_completion_event(Cq&) override { acks_sent.push_back(acks_now()); }
  } events;
  events.acks_now = [this] { return ack_psns().size(); };
  recv_events_ = &events;
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 100, 500);
  ASSERT_EQ(b.recv_cq->arm(false), 0);
  post_sends(a, b, 3);
  engine_->progress();  // the three SENDs, in one pass: one event, one ACK
  EXPECT_EQ(events.acks_sent, std::vector<size_t>{1});
  EXPECT_EQ(ack_psns(), std::vector<uint32_t>{102});
  expect_sends_complete(a, b, 3);
}

}  // namespace
}  // namespace softverbs
