// The RC and UC transport on an in-memory wire and a manual clock.
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

using packet::Opcode;

TEST_F(Transport, MultiPacketSendScattersAcrossSges) {
  Endpoint a = make_endpoint(10000), b = make_endpoint(10000);
  connect(a, b, 100, 200);
  fill(a.buffer, 3);
  Sge rsges[3] = {{reinterpret_cast<uint64_t>(b.buffer.data()), 1000, b.mr->lkey()},
                  {reinterpret_cast<uint64_t>(b.buffer.data()) + 1000, 5, b.mr->lkey()},
                  {reinterpret_cast<uint64_t>(b.buffer.data()) + 1005, 8995, b.mr->lkey()}};
  ASSERT_EQ(b.qp->post_recv({7, rsges}), 0);
  Sge ssge{reinterpret_cast<uint64_t>(a.buffer.data()), 2500, a.mr->lkey()};
  SendRequest wr;
  wr.wr_id = 9;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&ssge, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.wr_id, 7u);
  EXPECT_EQ(c.byte_len, 2500u);
  EXPECT_EQ(c.opcode, WcOpcode::kRecv);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 2500, b.buffer.begin()));
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 9u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  // 2500 bytes at a 256-byte MTU: FIRST, 8 MIDDLE, LAST (IBTA 9.7.2).
  EXPECT_EQ(count_opcode(Opcode::kRcSendFirst), 1u);
  EXPECT_EQ(count_opcode(Opcode::kRcSendMiddle), 8u);
  EXPECT_EQ(count_opcode(Opcode::kRcSendLast), 1u);
}

TEST_F(Transport, WriteWithImmediateAndReadAcrossPsnWrap) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  // The PSNs wrap from 0xffffff to 0 in the middle of the messages.
  connect(a, b, 0xfffffd, 0xfffffe);
  fill(a.buffer, 11);
  ASSERT_EQ(b.qp->post_recv({1, {}}), 0);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 3000, a.mr->lkey()};
  SendRequest w;
  w.wr_id = 2;
  w.opcode = WrOpcode::kRdmaWriteWithImm;
  w.flags = kWrSignaled;
  w.imm_data = 0x12345678;
  w.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data()) + 100;
  w.rkey = b.mr->rkey();
  w.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(w), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(c.imm_data, 0x12345678u);
  EXPECT_EQ(c.byte_len, 3000u);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 3000, b.buffer.begin() + 100));
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);

  // Read it back into a's upper half.
  Sge r{reinterpret_cast<uint64_t>(a.buffer.data()) + 4096, 3000, a.mr->lkey()};
  SendRequest rd;
  rd.wr_id = 3;
  rd.opcode = WrOpcode::kRdmaRead;
  rd.flags = kWrSignaled;
  rd.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data()) + 100;
  rd.rkey = b.mr->rkey();
  rd.sges = {&r, 1};
  ASSERT_EQ(a.qp->post_send(rd), 0);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.opcode, WcOpcode::kRdmaRead);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 3000, a.buffer.begin() + 4096));
  EXPECT_EQ(count_opcode(Opcode::kRcReadResponseFirst), 1u);
  EXPECT_EQ(count_opcode(Opcode::kRcReadResponseLast), 1u);
}

// A message longer than the window of unacknowledged packets: the requester
// asks for ACKs inside it (AckReq) so the window keeps moving.
TEST_F(Transport, MessageLongerThanTheWindowCompletes) {
  const size_t bytes = 2 << 20;  // 8192 packets at a 256-byte MTU
  Endpoint a = make_endpoint(bytes), b = make_endpoint(bytes);
  connect(a, b, 5, 6);
  fill(a.buffer, 21);
  ASSERT_EQ(write_whole_buffer(a, b), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_TRUE(a.buffer == b.buffer);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteMiddle), bytes / 256 - 2);
}

// Where the wire allows, a long SEND or WRITE travels as runs: one frame per
// window of packets, the payload pulled by the receiver in one copy. The
// PSNs, the ACKs and the data are those of the packets it stands for.
TEST_F(Transport, LostPacketIsRetransmittedAfterTheTimeout) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/14);
  fill(a.buffer, 5);
  ASSERT_EQ(b.qp->post_recv({1, {std::array<Sge, 1>{Sge{reinterpret_cast<uint64_t>(b.buffer.data()), 4096, b.mr->lkey()}}}}), 0);
  // 1024 bytes at MTU 256: four packets; the last one (frame 4) is lost, so
  // no later packet reveals the gap and only the timer can recover.
  drop_ = [](size_t index, const packet::DecodedPacket&) { return index == 4; };
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 1024, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  run_until_idle();
  Completion c;
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&c, 1)), 0);
  const uint64_t period = 4096ull << 14;  // 67.1 ms
  advance(period - 1000);
  EXPECT_EQ(a.send_cq->poll(std::span<Completion>(&c, 1)), 0);
  advance(2000);  // past the deadline: go back N from the lost PSN
  run_until_idle();
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.byte_len, 1024u);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 1024, b.buffer.begin()));
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&c, 1)), 0) << "delivered twice";
}

// IBTA 9.7.5.2.2: a gap in PSNs makes the responder NAK (sequence error)
// once; the requester goes back to the NAKed PSN at once, with no timeout.
TEST_F(Transport, GapIsRecoveredBySequenceNakWithoutTimeout) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/14);
  fill(a.buffer, 9);
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), 4096, b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({1, {&r, 1}}), 0);
  drop_ = [](size_t index, const packet::DecodedPacket&) { return index == 2; };
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 1024, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.byte_len, 1024u);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 1024, b.buffer.begin()));
  size_t naks = 0;
  for (auto& f : sent_)
    naks += f.opcode == Opcode::kRcAcknowledge && aeth::kind(f.syndrome) == aeth::Kind::kNak;
  EXPECT_EQ(naks, 1u) << "one sequence NAK per gap";
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
}

// IBTA 9.7.6.1.3: after retry_cnt retries the WR completes with
// RETRY_EXC_ERR: exactly retry_cnt + 1 transmissions.
TEST_F(Transport, RetryExhaustionAfterRetryCountPlusOneSends) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/10, /*retry=*/3);
  drop_ = [](size_t, const packet::DecodedPacket& p) { return p.headers.bth.opcode == Opcode::kRcWriteOnly; };
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 8, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data());
  wr.rkey = b.mr->rkey();
  wr.sges = {&s, 1};  // unsignaled: the error completes it all the same
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  for (int i = 0; i < 10 && a.send_cq->poll(std::span<Completion>(&c, 1)) == 0; ++i)
    advance(4096ull << 10);
  EXPECT_EQ(c.status, WcStatus::kRetryExcErr);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteOnly), 4u);
  EXPECT_EQ(a.qp->state(), QpState::kErr);
}

// IBTA 9.7.5.2.8: no receive WQE -> RNR NAK carrying min_rnr_timer; the
// requester waits that long before resending, rnr_retry times.
TEST_F(Transport, RnrNakBackoffAndExhaustion) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0, Mtu::k256, 14, 3, /*rnr_retry=*/2, /*min_rnr_timer=*/13);  // 0.96 ms
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 8, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  run_until_idle();
  ASSERT_EQ(count_opcode(Opcode::kRcSendOnly), 1u);
  ASSERT_EQ(sent_.back().opcode, Opcode::kRcAcknowledge);
  EXPECT_EQ(aeth::kind(sent_.back().syndrome), aeth::Kind::kRnrNak);
  EXPECT_EQ(aeth::value(sent_.back().syndrome), 13);
  advance(959'000);  // just under 960 us: nothing is resent yet
  EXPECT_EQ(count_opcode(Opcode::kRcSendOnly), 1u);
  advance(2'000);
  run_until_idle();
  EXPECT_EQ(count_opcode(Opcode::kRcSendOnly), 2u);
  advance(961'000);
  run_until_idle();
  EXPECT_EQ(count_opcode(Opcode::kRcSendOnly), 3u);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kRnrRetryExcErr);
}

TEST_F(Transport, RnrThenReceivePostedSucceeds) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0, Mtu::k256, 14, 3, 7, 1);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 8, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  run_until_idle();
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), 64, b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({5, {&r, 1}}), 0);
  advance(1'000'000);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.wr_id, 5u);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
}

// IBTA 10.3.1.4: RTS -> SQD finishes the messages already begun (an
// RNR-NAKed SEND is retried, the WRITE sent behind it resent) and only
// then reports the send queue drained; a WR posted in SQD waits for RTS.
TEST_F(Transport, SqdFinishesMessagesInProgressAndHoldsNewOnes) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0, Mtu::k256, 14, 3, /*rnr_retry=*/7, /*min_rnr_timer=*/1);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 8, a.mr->lkey()};
  SendRequest send;
  send.opcode = WrOpcode::kSend;
  send.flags = kWrSignaled;
  send.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(send), 0);
  ASSERT_EQ(write_whole_buffer(a, b), 0);
  run_until_idle();  // the SEND is RNR-NAKed; the WRITE behind it dropped
  QpAttributes sqd;
  sqd.state = QpState::kSqd;
  ASSERT_EQ(a.qp->modify(sqd, kQpAttrState), 0);
  QpAttributes now;
  a.qp->query(now);
  EXPECT_TRUE(now.sq_draining);
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), 64, b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({5, {&r, 1}}), 0);
  advance(1'000'000);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.opcode, WcOpcode::kSend);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.opcode, WcOpcode::kRdmaWrite);
  a.qp->query(now);
  EXPECT_FALSE(now.sq_draining);

  const size_t sends_before = count_opcode(Opcode::kRcSendOnly);
  ASSERT_EQ(b.qp->post_recv({6, {&r, 1}}), 0);
  ASSERT_EQ(a.qp->post_send(send), 0);
  advance(1'000'000);
  EXPECT_FALSE(poll_one(*a.send_cq, c)) << "a WR posted in SQD went out";
  EXPECT_EQ(count_opcode(Opcode::kRcSendOnly), sends_before);
  QpAttributes rts;
  rts.state = QpState::kRts;
  ASSERT_EQ(a.qp->modify(rts, kQpAttrState), 0);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
}

TEST_F(Transport, BadRkeyIsRemoteAccessError) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 8, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data());
  wr.rkey = b.mr->rkey() ^ 0x100;
  wr.sges = {&s, 1};
  SendRequest second = wr;
  second.rkey = b.mr->rkey();
  second.wr_id = 42;
  ASSERT_EQ(a.qp->post_send(wr), 0);
  ASSERT_EQ(a.qp->post_send(second), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kRemAccessErr);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kWrFlushErr);
  EXPECT_EQ(c.wr_id, 42u);
  EXPECT_EQ(a.qp->state(), QpState::kErr);
  EXPECT_EQ(b.qp->state(), QpState::kErr);
}

TEST_F(Transport, MessageLargerThanReceiveBuffer) {
  Endpoint a = make_endpoint(1024), b = make_endpoint(1024);
  connect(a, b, 0, 0);
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), 100, b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({1, {&r, 1}}), 0);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 500, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kLocLenErr);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kRemInvReqErr);
}

TEST_F(Transport, LocalKeyOfAnotherPdIsLocalProtectionError) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0);
  Sge s{reinterpret_cast<uint64_t>(b.buffer.data()), 8, b.mr->lkey()};  // b's PD
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kLocProtErr);
}

// IBTA 10.3.1: entering ERR flushes every outstanding WR, in order.
TEST_F(Transport, ModifyToErrorFlushesInOrder) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0);
  for (uint64_t id = 1; id <= 3; ++id) {
    Sge r{reinterpret_cast<uint64_t>(a.buffer.data()), 64, a.mr->lkey()};
    ASSERT_EQ(a.qp->post_recv({id, {&r, 1}}), 0);
  }
  QpAttributes attr;
  attr.state = QpState::kErr;
  ASSERT_EQ(a.qp->modify(attr, kQpAttrState), 0);
  for (uint64_t id = 1; id <= 3; ++id) {
    Completion c;
    ASSERT_EQ(a.recv_cq->poll(std::span<Completion>(&c, 1)), 1);
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(c.status, WcStatus::kWrFlushErr);
  }
}

// IBTA 9.4.5: compare-and-swap and fetch-and-add return the original value
// into the requester's 8-byte buffer.
TEST_F(Transport, AtomicsReturnTheOriginalValue) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0);
  auto* target = reinterpret_cast<uint64_t*>(b.buffer.data() + 8);
  *target = 100;
  auto* result = reinterpret_cast<uint64_t*>(a.buffer.data());
  Sge s{reinterpret_cast<uint64_t>(result), 8, a.mr->lkey()};
  SendRequest faa;
  faa.opcode = WrOpcode::kAtomicFetchAdd;
  faa.flags = kWrSignaled;
  faa.remote_addr = reinterpret_cast<uint64_t>(target);
  faa.rkey = b.mr->rkey();
  faa.compare_add = 5;
  faa.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(faa), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.opcode, WcOpcode::kFetchAdd);
  EXPECT_EQ(*result, 100u);
  EXPECT_EQ(*target, 105u);
  SendRequest cas = faa;
  cas.opcode = WrOpcode::kAtomicCmpSwp;
  cas.compare_add = 105;
  cas.swap = 7;
  ASSERT_EQ(a.qp->post_send(cas), 0);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.opcode, WcOpcode::kCompSwap);
  EXPECT_EQ(*result, 105u);
  EXPECT_EQ(*target, 7u);
  cas.compare_add = 1;  // mismatch: memory unchanged, original returned
  cas.swap = 99;
  ASSERT_EQ(a.qp->post_send(cas), 0);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(*result, 7u);
  EXPECT_EQ(*target, 7u);
}

// IBTA 9.7.5.3.2: a duplicate atomic is answered from the saved result and
// never executed twice.
TEST_F(Transport, LostAtomicAckIsReplayedNotReexecuted) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/12);
  auto* target = reinterpret_cast<uint64_t*>(b.buffer.data());
  *target = 40;
  auto* result = reinterpret_cast<uint64_t*>(a.buffer.data() + 8);
  drop_ = [](size_t, const packet::DecodedPacket& p) {
    static int acks = 0;
    return p.headers.bth.opcode == Opcode::kRcAtomicAcknowledge && ++acks == 1;
  };
  Sge s{reinterpret_cast<uint64_t>(result), 8, a.mr->lkey()};
  SendRequest faa;
  faa.opcode = WrOpcode::kAtomicFetchAdd;
  faa.flags = kWrSignaled;
  faa.remote_addr = reinterpret_cast<uint64_t>(target);
  faa.rkey = b.mr->rkey();
  faa.compare_add = 2;
  faa.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(faa), 0);
  run_until_idle();
  advance((4096ull << 12) + 1000);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(*result, 40u);
  EXPECT_EQ(*target, 42u) << "executed twice";
  EXPECT_EQ(count_opcode(Opcode::kRcFetchAdd), 2u);
  EXPECT_EQ(b.qp->counters().atomic_replays, 1u);
  EXPECT_EQ(a.qp->counters().retransmit_timeouts, 1u);
  EXPECT_EQ(a.qp->counters().retransmitted_packets, 1u);
}

// IBTA 9.8.3: UC loses a message with a lost packet silently, and the
// receive WQE serves the next message.
TEST_F(Transport, UcLostPacketDropsOnlyThatMessage) {
  qp_type_ = QpType::kUc;
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  fill(a.buffer, 1);
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), 4096, b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({77, {&r, 1}}), 0);
  drop_ = [](size_t index, const packet::DecodedPacket&) { return index == 2; };
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 1024, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);  // 4 packets; the 2nd is lost
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));  // UC completes on sending
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  run_until_idle();
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&c, 1)), 0);
  Sge small{reinterpret_cast<uint64_t>(a.buffer.data()) + 7, 300, a.mr->lkey()};
  wr.sges = {&small, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.wr_id, 77u);
  EXPECT_EQ(c.byte_len, 300u);
  EXPECT_TRUE(std::equal(a.buffer.begin() + 7, a.buffer.begin() + 307, b.buffer.begin()));
  EXPECT_EQ(b.qp->counters().uc_messages_dropped, 1u);
  EXPECT_EQ(count_opcode(Opcode::kRcAcknowledge), 0u) << "UC is never acknowledged";
}

// UC is never acknowledged, so nothing may hold a message back for want of
// ACKs: one longer than the RC window goes out whole and completes.
TEST_F(Transport, UcMessageLongerThanTheWindowCompletes) {
  qp_type_ = QpType::kUc;
  const size_t bytes = 300 << 10;  // 1200 packets at a 256-byte MTU
  Endpoint a = make_endpoint(bytes), b = make_endpoint(bytes);
  connect(a, b, 0, 0);
  fill(a.buffer, 5);
  ASSERT_EQ(write_whole_buffer(a, b), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  run_until_idle();
  EXPECT_TRUE(a.buffer == b.buffer);
}

// Ping-pong under random loss: every message arrives exactly once, in order,
// intact, and nothing but timeouts and NAKs is needed to recover.
TEST_F(Transport, PingPongSurvivesRandomLoss) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 1000, 2000, Mtu::k1024, /*timeout=*/10, /*retry=*/7);
  uint64_t state = 12345;
  drop_ = [&state](size_t, const packet::DecodedPacket&) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % 100 < 3;  // 3% loss
  };
  Endpoint* side[2] = {&a, &b};
  for (int round = 0; round < 300; ++round) {
    Endpoint& from = *side[round % 2];
    Endpoint& to = *side[1 - round % 2];
    const uint32_t len = 1 + (round * 997) % 4000;
    for (uint32_t i = 0; i < len; ++i) from.buffer[i] = static_cast<uint8_t>(round + i);
    Sge r{reinterpret_cast<uint64_t>(to.buffer.data()) + 4096, 4096, to.mr->lkey()};
    ASSERT_EQ(to.qp->post_recv({static_cast<uint64_t>(round), {&r, 1}}), 0);
    Sge s{reinterpret_cast<uint64_t>(from.buffer.data()), len, from.mr->lkey()};
    SendRequest wr;
    wr.wr_id = round;
    wr.opcode = WrOpcode::kSend;
    wr.flags = kWrSignaled;
    wr.sges = {&s, 1};
    ASSERT_EQ(from.qp->post_send(wr), 0);
    Completion rc{}, sc{};
    bool got_recv = false, got_send = false;
    for (int step = 0; step < 200 && !(got_recv && got_send); ++step) {
      if (!got_recv) got_recv = to.recv_cq->poll(std::span<Completion>(&rc, 1)) == 1;
      if (!got_send) got_send = from.send_cq->poll(std::span<Completion>(&sc, 1)) == 1;
      if (!(got_recv && got_send) && wire_->queued() == 0) advance(4096ull << 10);
    }
    ASSERT_TRUE(got_recv && got_send) << "round " << round;
    ASSERT_EQ(rc.status, WcStatus::kSuccess);
    ASSERT_EQ(rc.wr_id, static_cast<uint64_t>(round));
    ASSERT_EQ(rc.byte_len, len);
    ASSERT_EQ(sc.status, WcStatus::kSuccess);
    ASSERT_TRUE(std::equal(from.buffer.begin(), from.buffer.begin() + len,
                           to.buffer.begin() + 4096));
  }
  Completion extra;
  EXPECT_EQ(a.recv_cq->poll(std::span<Completion>(&extra, 1)), 0);
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&extra, 1)), 0);
  const QpCounters ca = a.qp->counters(), cb = b.qp->counters();
  EXPECT_GT(ca.retransmitted_packets + cb.retransmitted_packets, 0u);
  // Both recovery paths ran: the timer (a lost last packet or ACK) and the
  // sequence NAK (a lost packet inside a message).
  EXPECT_GT(ca.retransmit_timeouts + cb.retransmit_timeouts, 0u);
  EXPECT_GT(ca.sequence_naks_received + cb.sequence_naks_received, 0u);
  EXPECT_GT(ca.duplicate_requests + cb.duplicate_requests, 0u);
}

// IBTA 9.7.5.1.x: an ACK for a request behind a READ whose response was lost
// tells the requester the response is gone (an implied NAK): it asks again.
TEST_F(Transport, LostReadResponseIsRecoveredByTheAckBehindIt) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/14);
  fill(b.buffer, 4);
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()) + 2048, 64, b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({1, {&r, 1}}), 0);
  drop_ = [](size_t, const packet::DecodedPacket& p) {
    static int responses = 0;
    return p.headers.bth.opcode == Opcode::kRcReadResponseOnly && ++responses == 1;
  };
  Sge rs{reinterpret_cast<uint64_t>(a.buffer.data()), 100, a.mr->lkey()};
  SendRequest rd;
  rd.wr_id = 1;
  rd.opcode = WrOpcode::kRdmaRead;
  rd.flags = kWrSignaled;
  rd.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data());
  rd.rkey = b.mr->rkey();
  rd.sges = {&rs, 1};
  ASSERT_EQ(a.qp->post_send(rd), 0);
  Sge ss{reinterpret_cast<uint64_t>(a.buffer.data()) + 1024, 8, a.mr->lkey()};
  SendRequest send;
  send.wr_id = 2;
  send.opcode = WrOpcode::kSend;
  send.flags = kWrSignaled;
  send.sges = {&ss, 1};
  ASSERT_EQ(a.qp->post_send(send), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c)) << "no timeout needed";
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(b.buffer.begin(), b.buffer.begin() + 100, a.buffer.begin()));
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(a.qp->counters().implied_naks, 1u);
  EXPECT_EQ(a.qp->counters().retransmit_timeouts, 0u);
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&c, 1)), 0) << "SEND delivered twice";
}

TEST_F(Transport, IllegalTransitionChangesNothing) {
  Endpoint a = make_endpoint(64);
  QpAttributes attr;
  attr.state = QpState::kRtr;
  EXPECT_EQ(a.qp->modify(attr, kQpAttrState), EINVAL);
  EXPECT_EQ(a.qp->state(), QpState::kReset);
  attr.state = QpState::kInit;
  attr.port_num = 2;  // no such port
  EXPECT_EQ(a.qp->modify(attr, kQpAttrState | kQpAttrPort | kQpAttrPkeyIndex | kQpAttrAccessFlags),
            EINVAL);
  EXPECT_EQ(a.qp->state(), QpState::kReset);
}

}  // namespace
}  // namespace softverbs
