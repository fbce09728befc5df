// Runs (run_frame.h) through the transport: long messages as runs pulled
// with one copy, and a run whose payload cannot be pulled.
#include <sys/mman.h>

#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

using packet::Opcode;

TEST_F(Transport, LongMessagesTravelAsRunsAndArriveIntact) {
  wire_->allow_runs(true);
  const size_t bytes = 300 * 1024;
  Endpoint a = make_endpoint(2 * bytes), b = make_endpoint(2 * bytes);
  connect(a, b, 0xfffff0, 7, Mtu::k1024);  // PSNs wrap inside the first run
  fill(a.buffer, 13);
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), static_cast<uint32_t>(bytes), b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({1, {&r, 1}}), 0);
  // The SEND gathers from two SGEs; the WRITE lands in b's upper half.
  Sge s[2] = {{reinterpret_cast<uint64_t>(a.buffer.data()), 1000, a.mr->lkey()},
              {reinterpret_cast<uint64_t>(a.buffer.data()) + 1000,
               static_cast<uint32_t>(bytes - 1000), a.mr->lkey()}};
  SendRequest send;
  send.wr_id = 2;
  send.opcode = WrOpcode::kSendWithImm;
  send.imm_data = 0xabcd;
  send.flags = kWrSignaled;
  send.sges = {s, 2};
  ASSERT_EQ(a.qp->post_send(send), 0);
  Sge w{reinterpret_cast<uint64_t>(a.buffer.data()) + bytes, static_cast<uint32_t>(bytes),
        a.mr->lkey()};
  SendRequest write;
  write.wr_id = 3;
  write.opcode = WrOpcode::kRdmaWrite;
  write.flags = kWrSignaled;
  write.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data()) + bytes;
  write.rkey = b.mr->rkey();
  write.sges = {&w, 1};
  ASSERT_EQ(a.qp->post_send(write), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.byte_len, bytes);
  EXPECT_EQ(c.imm_data, 0xabcdu);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 2u);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 3u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_TRUE(a.buffer == b.buffer);
  const QpCounters sent = a.qp->counters(), received = b.qp->counters();
  // 300 packets per message at 1 KiB, at most 256 in flight: a few runs
  // stand for the 600 packets; only where the window had room for one
  // packet did one go as a frame of its own.
  EXPECT_GE(sent.runs_sent, 4u);
  EXPECT_EQ(received.runs_received, sent.runs_sent);
  EXPECT_EQ(runs_seen_, sent.runs_sent);
  EXPECT_EQ(sent.packets_sent, 600u);
  const size_t request_frames = sent_.size() - count_opcode(Opcode::kRcAcknowledge);
  EXPECT_LE(request_frames, sent.runs_sent + 8);
}

// A run whose payload cannot be pulled (here the sender's buffer is gone)
// places nothing and reports nothing: the responder asks for it again, and
// the requester, retrying, ends with a retry error, never a success.
TEST_F(Transport, RunThatCannotBePulledIsNeverReportedDone) {
  wire_->allow_runs(true);
  const size_t bytes = 64 * 1024;
  Endpoint a = make_endpoint(bytes), b = make_endpoint(bytes);
  connect(a, b, 0, 0, Mtu::k4096, /*timeout=*/14, /*retry=*/2);
  void* gone = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  Errno err;
  auto mr = hca_->register_mr(*a.pd, reinterpret_cast<uint64_t>(gone), bytes,
                              kAccessLocalWrite, err);
  ASSERT_TRUE(mr);
  munmap(gone, bytes);
  Sge s{reinterpret_cast<uint64_t>(gone), static_cast<uint32_t>(bytes), mr->lkey()};
  SendRequest write;
  write.opcode = WrOpcode::kRdmaWrite;
  write.flags = kWrSignaled;
  write.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data());
  write.rkey = b.mr->rkey();
  write.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(write), 0);
  Completion c;
  bool got = false;
  for (int i = 0; i < 10 && !got; ++i) {
    run_until_idle();
    got = a.send_cq->poll(std::span<Completion>(&c, 1)) == 1;
    if (!got) advance(4096ull << 14);  // the local ACK timeout
  }
  ASSERT_TRUE(got);
  EXPECT_EQ(c.status, WcStatus::kRetryExcErr);
  EXPECT_GE(b.qp->counters().run_pull_failures, 3u);
  EXPECT_EQ(b.qp->counters().sequence_naks_sent, b.qp->counters().run_pull_failures);
}

// IBTA 9.7.6.1.3: a lost packet is resent when the local ACK timer expires
// (4.096 us * 2^timeout) and the message arrives once, intact.

}  // namespace
}  // namespace softverbs
