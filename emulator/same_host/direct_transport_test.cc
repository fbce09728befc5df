// WRITEs and READs executed on the target directly (direct_execution.h),
// through the transport: what lands, what the responder makes of it
// afterwards, and what still travels as packets.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "emulator/same_host/direct_transport_fixture.h"

namespace softverbs {
namespace {

using packet::Opcode;

TEST_F(DirectTransport, WriteAndReadCompleteAtOnceWithNoPacketAndTheNextSendFollowsThem) {
  Endpoint a = make_endpoint(64 * 1024), b = make_endpoint(64 * 1024);
  connect(a, b, 100, 200, Mtu::k1024);
  fill(a.buffer, 3);
  fill(b.buffer, 9);
  const std::vector<uint8_t> b_before = b.buffer;
  // A WRITE of 10 KiB (ten packets' worth of PSNs), then a READ of 5 KiB.
  Sge from = sge(a, 0, 10 * 1024);
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, 1, from, b, 4096)), 0);
  Sge into = sge(a, 32 * 1024, 5 * 1024);
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaRead, 2, into, b, 40 * 1024)), 0);
  // Done inside post_send: nothing was sent, and nothing is left to serve.
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(wire_->queued(), 0u);
  Completion c[2];
  ASSERT_EQ(a.send_cq->poll(std::span<Completion>(c, 2)), 2u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[0].status, WcStatus::kSuccess);
  EXPECT_EQ(c[0].opcode, WcOpcode::kRdmaWrite);
  EXPECT_EQ(c[1].wr_id, 2u);
  EXPECT_EQ(c[1].status, WcStatus::kSuccess);
  EXPECT_EQ(c[1].byte_len, 5u * 1024);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 10 * 1024, b.buffer.begin() + 4096));
  EXPECT_TRUE(std::equal(b.buffer.begin() + 40 * 1024, b.buffer.begin() + 45 * 1024,
                         a.buffer.begin() + 32 * 1024));
  EXPECT_TRUE(std::equal(b_before.begin(), b_before.begin() + 4096, b.buffer.begin()));
  EXPECT_EQ(a.qp->counters().direct_operations, 2u);
  EXPECT_EQ(b.qp->counters().executed_by_initiators, 2u);

  // A SEND goes as a packet with the PSN after the READ's five, and the
  // responder, having taken up where the initiator left it, expects it.
  Sge r = sge(b, 60 * 1024, 64);
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  Sge s = sge(a, 0, 64);
  ASSERT_EQ(a.qp->post_send(send_of(3, s)), 0);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].opcode, Opcode::kRcSendOnly);
  EXPECT_EQ(sent_[0].psn, 100u + 10 + 5);
  Completion got;
  ASSERT_TRUE(poll_one(*b.recv_cq, got));
  EXPECT_EQ(got.status, WcStatus::kSuccess);
  ASSERT_TRUE(poll_one(*a.send_cq, got));
  EXPECT_EQ(got.wr_id, 3u);
  EXPECT_EQ(got.status, WcStatus::kSuccess);
  EXPECT_EQ(b.qp->counters().sequence_naks_sent, 0u);
}

// Atomics with nothing outstanding on a word mapped here (a target in this
// process) run on it at once, as the processor's atomic instructions: each
// answers with the word's former value, no packet is sent, and the
// responder expects the SEND after them.
TEST_F(DirectTransport, AtomicsWithNothingOutstandingCompleteAtOnceWithTheFormerValue) {
  wire_->direct_as_same_process(true);
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 100, 200);
  const uint64_t word = reinterpret_cast<uint64_t>(b.buffer.data()) + 64;
  const uint64_t initial = 0x1000;
  std::memcpy(b.buffer.data() + 64, &initial, sizeof initial);
  Sge r1 = sge(a, 0, 8), r2 = sge(a, 8, 8);
  ASSERT_EQ(a.qp->post_send(atomic(WrOpcode::kAtomicFetchAdd, 1, r1, word, b.mr->rkey(), 0x22)), 0);
  ASSERT_EQ(a.qp->post_send(
                atomic(WrOpcode::kAtomicCmpSwp, 2, r2, word, b.mr->rkey(), 0x1022, 0xdead)),
            0);
  SendRequest put;
  put.wr_id = 3;
  put.opcode = WrOpcode::kAtomicWrite;
  put.flags = kWrSignaled;
  put.remote_addr = word + 8;
  put.rkey = b.mr->rkey();
  put.atomic_write_data = 0x77;
  ASSERT_EQ(a.qp->post_send(put), 0);
  EXPECT_TRUE(sent_.empty());
  Completion c[3];
  ASSERT_EQ(a.send_cq->poll(std::span<Completion>(c, 3)), 3u);
  const WcOpcode opcodes[] = {WcOpcode::kFetchAdd, WcOpcode::kCompSwap, WcOpcode::kAtomicWrite};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c[i].wr_id, i + 1u);
    EXPECT_EQ(c[i].status, WcStatus::kSuccess);
    EXPECT_EQ(c[i].opcode, opcodes[i]);
  }
  EXPECT_EQ(word_at(a.buffer, 0), 0x1000u);
  EXPECT_EQ(word_at(a.buffer, 8), 0x1022u);
  EXPECT_EQ(word_at(b.buffer, 64), 0xdeadu);
  EXPECT_EQ(word_at(b.buffer, 72), 0x77u);
  EXPECT_EQ(a.qp->counters().direct_operations, 3u);
  EXPECT_EQ(b.qp->counters().executed_by_initiators, 3u);

  Sge r = sge(b, 1024, 64);
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  Sge s = sge(a, 512, 64);
  ASSERT_EQ(a.qp->post_send(send_of(4, s)), 0);
  ASSERT_EQ(sent_.size(), 1u);
  EXPECT_EQ(sent_[0].psn, 103u);
  Completion got;
  ASSERT_TRUE(poll_one(*b.recv_cq, got));
  EXPECT_EQ(got.status, WcStatus::kSuccess);
  EXPECT_EQ(b.qp->counters().sequence_naks_sent, 0u);
}

// What the responder refuses an atomic for goes as packets and gets its
// NAK: a word that is not aligned (IBTA 9.4.5), a result buffer that is
// not 8 bytes (LOC_LEN_ERR before anything is sent).
TEST_F(DirectTransport, AnAtomicTheResponderWouldRefuseTravelsAsPackets) {
  wire_->direct_as_same_process(true);
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  Sge result = sge(a, 0, 8);
  const uint64_t unaligned = reinterpret_cast<uint64_t>(b.buffer.data()) + 68;
  ASSERT_EQ(a.qp->post_send(atomic(WrOpcode::kAtomicFetchAdd, 1, result, unaligned,
                                   b.mr->rkey(), 1)),
            0);
  EXPECT_EQ(a.qp->counters().direct_operations, 0u);
  EXPECT_EQ(count_opcode(Opcode::kRcFetchAdd), 1u);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kRemInvReqErr);

  Endpoint d = make_endpoint(4096), e = make_endpoint(4096);
  connect(d, e, 0, 0);
  Sge short_result = sge(d, 0, 4);
  const uint64_t before = word_at(e.buffer, 0);
  ASSERT_EQ(d.qp->post_send(atomic(WrOpcode::kAtomicFetchAdd, 2, short_result,
                                   reinterpret_cast<uint64_t>(e.buffer.data()), e.mr->rkey(), 1)),
            0);
  ASSERT_TRUE(poll_one(*d.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kLocLenErr);
  EXPECT_EQ(d.qp->counters().direct_operations, 0u);
  EXPECT_EQ(word_at(e.buffer, 0), before) << "an atomic refused before it was sent ran";
}

// A word of another process reached only by system call (its MR pages
// not shared): no system call is atomic against that process's CPU, so the
// atomic travels as packets and its responder runs it.
TEST_F(DirectTransport, AnAtomicOnPagesOnlyASystemCallReachesTravelsAsPackets) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  std::memset(b.buffer.data(), 0, 8);
  Sge result = sge(a, 0, 8);
  ASSERT_EQ(a.qp->post_send(atomic(WrOpcode::kAtomicFetchAdd, 1, result,
                                   reinterpret_cast<uint64_t>(b.buffer.data()), b.mr->rkey(), 5)),
            0);
  EXPECT_EQ(a.qp->counters().direct_operations, 0u);
  EXPECT_EQ(count_opcode(Opcode::kRcFetchAdd), 1u);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(word_at(b.buffer, 0), 5u);
}

TEST_F(DirectTransport, WhatTheResponderWouldRefuseTravelsAsPacketsAndGetsItsNak) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  const std::vector<uint8_t> b_before = b.buffer;
  Sge from = sge(a, 0, 64);
  // Past the end of b's MR: the responder's answer is a remote access error.
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, 1, from, b, 4096 - 32)), 0);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteOnly), 1u);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kRemAccessErr);
  EXPECT_EQ(a.qp->counters().direct_operations, 0u);
  EXPECT_TRUE(b.buffer == b_before);
}

TEST_F(DirectTransport, AnMrDeregisteredOnTheTargetIsNoLongerReached) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  const uint32_t rkey = b.mr->rkey();
  Sge from = sge(a, 0, 64);
  SendRequest write = one_sided(WrOpcode::kRdmaWrite, 1, from, b, 0);
  ASSERT_EQ(a.qp->post_send(write), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(a.qp->counters().direct_operations, 1u);
  b.mr.reset();
  fill(b.buffer, 77);
  const std::vector<uint8_t> b_before = b.buffer;
  write.wr_id = 2;
  write.rkey = rkey;
  ASSERT_EQ(a.qp->post_send(write), 0);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.status, WcStatus::kRemAccessErr);
  EXPECT_EQ(a.qp->counters().direct_operations, 1u);
  EXPECT_TRUE(b.buffer == b_before);
}

// Mapping a peer's ring and target area costs milliseconds on a VM that
// shadows page tables: it is done when the QP connects, not at the first WQE.
TEST_F(DirectTransport, ConnectingAQpMapsItsPeersSharedMemoryBeforeAnyWqe) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  const uint64_t asked_before = wire_->target_areas_asked();
  connect(a, b, 0, 0);
  // Once for each side, each naming the other's QP.
  EXPECT_EQ(wire_->target_areas_asked(), asked_before + 2);
  EXPECT_EQ(wire_->last_target_area_asked(), a.qp->qpn());  // b's, last to connect
  EXPECT_TRUE(sent_.empty());
}

TEST_F(DirectTransport, ATargetQpOutOfRtsTakesNothingDirectly) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/14, /*retry=*/1);
  QpAttributes to_error;
  to_error.state = QpState::kErr;
  ASSERT_EQ(b.qp->modify(to_error, kQpAttrState), 0);
  const std::vector<uint8_t> b_before = b.buffer;
  fill(a.buffer, 5);
  Sge from = sge(a, 0, 64);
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, 1, from, b, 0)), 0);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteOnly), 1u);
  EXPECT_EQ(a.qp->counters().direct_operations, 0u);
  run_until_idle();
  EXPECT_TRUE(b.buffer == b_before);
}

TEST_F(DirectTransport, WritesBehindASendInFlightGoAsPacketsInOrder) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 0, 0);
  Sge r = sge(b, 0, 64);
  ASSERT_EQ(b.qp->post_recv({7, {&r, 1}}), 0);
  Sge s = sge(a, 0, 64);
  ASSERT_EQ(a.qp->post_send(send_of(1, s)), 0);
  Sge from = sge(a, 4096, 64);
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, 2, from, b, 4096)), 0);
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, 3, from, b, 4096 + 64)), 0);
  // Sent at once behind the SEND, as an HCA would.
  EXPECT_EQ(count_opcode(Opcode::kRcWriteOnly), 2u);
  for (uint64_t id = 1; id <= 3; ++id) {
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
  // With nothing outstanding any more, the next one is executed directly.
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, 4, from, b, 4096 + 128)), 0);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteOnly), 2u);
  EXPECT_EQ(a.qp->counters().direct_operations, 1u);
}

// Holds b's target entry as if b's responder were in it (for a process that
// does not exist), so that the next operation on it travels.
void hold_entry(Endpoint& b) {
  TargetQpEntry* entry = b.qp->impl().target_entry;
  ASSERT_NE(entry, nullptr);
  std::atomic_ref<uint32_t>(entry->lock).store(0x7ffffffe);
}
void release_entry(Endpoint& b) { std::atomic_ref<uint32_t>(b.qp->impl().target_entry->lock).store(0); }

TEST_F(DirectTransport, AfterADeclineLongWritesTravelAndEveryFewWaitForTheOthersToTryAgain) {
  constexpr uint32_t kBytes = 16 * 1024;  // four packets at 4 KiB
  Endpoint a = make_endpoint(kBytes), b = make_endpoint(11 * kBytes);
  connect(a, b, 0, 0, Mtu::k4096);
  hold_entry(b);
  fill(a.buffer, 1);
  Sge from = sge(a, 0, kBytes);
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, 1, from, b, 0)), 0);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteFirst), 1u);
  release_entry(b);
  // The next eight travel behind it; the ninth waits for all of them to
  // be acknowledged and is then executed directly.
  for (uint64_t id = 2; id <= 10; ++id)
    ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, id, from, b, kBytes * id)), 0);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteFirst), 9u);
  EXPECT_EQ(a.qp->counters().direct_operations, 0u);
  run_until_idle();
  for (uint64_t id = 1; id <= 10; ++id) {
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
  EXPECT_EQ(count_opcode(Opcode::kRcWriteFirst), 9u);
  EXPECT_EQ(a.qp->counters().direct_operations, 1u);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.end(), b.buffer.begin() + 10 * kBytes));
}

TEST_F(DirectTransport, ShortWritesBehindPacketsInFlightTravelAtOnce) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  hold_entry(b);
  Sge from = sge(a, 0, 64);
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, 1, from, b, 0)), 0);
  release_entry(b);
  for (uint64_t id = 2; id <= 12; ++id)
    ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, id, from, b, 64 * id)), 0);
  // Not one waited: packets cost a target that serves them less than a
  // cross-memory copy costs this side.
  EXPECT_EQ(count_opcode(Opcode::kRcWriteOnly), 12u);
  run_until_idle();
  for (uint64_t id = 1; id <= 12; ++id) {
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, id);
  }
  EXPECT_EQ(a.qp->counters().direct_operations, 0u);
}

TEST_F(DirectTransport, ShortWritesPostedAheadWithoutPollingBecomePacketsAfterSixteen) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  Sge from = sge(a, 0, 64);
  for (uint64_t id = 1; id <= 20; ++id)
    ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, id, from, b, 64 * id)), 0);
  // A stream: the target serves packets while this side posts the next.
  EXPECT_EQ(a.qp->counters().direct_operations, 16u);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteOnly), 4u);
  run_until_idle();
  for (uint64_t id = 1; id <= 20; ++id) {
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
  // Polled, and nothing outstanding: the next one is executed directly.
  ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, 21, from, b, 0)), 0);
  EXPECT_EQ(a.qp->counters().direct_operations, 17u);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteOnly), 4u);
}

// Within one process a direct copy is a memcpy, cheaper than packets at any
// pace: a stream stays direct.
TEST_F(DirectTransport, WithinOneProcessShortWritesPostedAheadStayDirect) {
  wire_->direct_as_same_process(true);
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  fill(a.buffer, 5);
  for (uint64_t id = 1; id <= 20; ++id) {
    Sge from = sge(a, 64 * id, 64);
    ASSERT_EQ(a.qp->post_send(one_sided(WrOpcode::kRdmaWrite, id, from, b, 64 * id)), 0);
  }
  EXPECT_EQ(a.qp->counters().direct_operations, 20u);
  EXPECT_TRUE(sent_.empty());
  for (uint64_t id = 1; id <= 20; ++id) {
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
  EXPECT_TRUE(std::equal(a.buffer.begin() + 64, a.buffer.begin() + 21 * 64, b.buffer.begin() + 64));
}


// Without shared pages, the target's memory became inaccessible after it
// was registered (made PROT_NONE rather than unmapped, so that nothing
// else is mapped there meanwhile): the guarded copy fails without a
// signal, and the operation travels as packets, where the responder
// answers with the error. (Shared pages stay reachable, as pinned pages.)
TEST_F(DirectTransport, WithinOneProcessAnInaccessibleTargetFailsAsPacketsWithoutASignal) {
  SharingPages not_shared(false);
  wire_->direct_as_same_process(true);
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* gone = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  MrInit init;
  init.addr = reinterpret_cast<uint64_t>(gone);
  init.length = page;
  init.iova = init.addr;
  init.access = kAccessLocalWrite | kAccessRemoteWrite;
  Errno err;
  std::unique_ptr<Mr> mr = hca_->register_mr(*b.pd, init, err);
  ASSERT_TRUE(mr) << err;
  ASSERT_EQ(0, mprotect(gone, page, PROT_NONE));

  Sge from = sge(a, 0, 64);
  SendRequest write = one_sided(WrOpcode::kRdmaWrite, 1, from, b, 0);
  write.remote_addr = init.addr;
  write.rkey = mr->rkey();
  ASSERT_EQ(a.qp->post_send(write), 0);
  EXPECT_EQ(a.qp->counters().direct_operations, 0u);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteOnly), 1u);
  run_until_idle();
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kRemAccessErr);
  mr.reset();
  munmap(gone, page);
}

}  // namespace
}  // namespace softverbs
