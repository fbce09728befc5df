// WRITEs and READs executed on the target directly (direct_execution.h),
// through the transport: what lands, what the responder makes of it
// afterwards, and what still travels as packets.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "emulator/memory/address_space.h"
#include "emulator/memory/page_move.h"
#include "emulator/same_host/deferred_sharing.h"
#include "emulator/same_host/shared_pages.h"
#include "emulator/same_host/target_table.h"
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

using packet::Opcode;

class DirectTransport : public Transport {
 protected:
  void SetUp() override {
    Transport::SetUp();
    wire_->allow_direct(true);
  }
};

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

SendRequest atomic(WrOpcode opcode, uint64_t wr_id, Sge& result, uint64_t remote_addr,
                   uint32_t rkey, uint64_t compare_add, uint64_t swap = 0) {
  SendRequest wr;
  wr.wr_id = wr_id;
  wr.opcode = opcode;
  wr.flags = kWrSignaled;
  wr.sges = {&result, 1};
  wr.remote_addr = remote_addr;
  wr.rkey = rkey;
  wr.compare_add = compare_add;
  wr.swap = swap;
  return wr;
}

uint64_t word_at(const std::vector<uint8_t>& buffer, size_t offset) {
  uint64_t w = 0;
  std::memcpy(&w, buffer.data() + offset, sizeof w);
  return w;
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

// Whether registrations share their pages, for one test's time.
class SharingPages {
 public:
  explicit SharingPages(bool on) : was_(SharedPages::enabled()) { SharedPages::set_enabled(on); }
  ~SharingPages() { SharedPages::set_enabled(was_); }

 private:
  bool was_;
};

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

// The target's MR pages shared (SOFTVERBS_SHARE_MR_PAGES, shared_pages.h):
// the initiator maps them and a direct copy is a memcpy, so a stream of
// short ones stays direct as within one process. The target's MR lies on
// pages of its own, as only whole pages are shared.
class DirectIntoSharedPages : public DirectTransport {
 protected:
  static constexpr size_t kBytes = 256 * 1024;
  void SetUp() override {
    DirectTransport::SetUp();
    // No progress thread here: this thread stands for the target's life.
    engine_->same_host().target_table().hold_liveness();
    void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    pages_ = static_cast<uint8_t*>(p);
    std::memset(pages_, 9, kBytes);
  }
  void TearDown() override {
    engine_->same_host().target_table().release_liveness();
    DirectTransport::TearDown();
    munmap(pages_, kBytes);
  }
  SharingPages sharing_{true};
  // b's MR over the pages (held by the test, after b's PD).
  void register_pages(Endpoint& b, std::unique_ptr<Mr>& mr,
                      uint32_t remote_access = kAccessRemoteWrite | kAccessRemoteRead) {
    Errno err;
    mr = hca_->register_mr(*b.pd, reinterpret_cast<uint64_t>(pages_), kBytes,
                           kAccessLocalWrite | remote_access, err);
    ASSERT_TRUE(mr) << err;
    ASSERT_TRUE(mr->shared_pages()) << "the target's pages were not shared";
    rkey_ = mr->rkey();
  }
  SendRequest into_pages(WrOpcode opcode, uint64_t wr_id, Sge& local, uint64_t offset) {
    SendRequest wr = send_of(wr_id, local);
    wr.opcode = opcode;
    wr.remote_addr = reinterpret_cast<uint64_t>(pages_) + offset;
    wr.rkey = rkey_;
    return wr;
  }
  uint8_t* pages_ = nullptr;
  uint32_t rkey_ = 0;
};

TEST_F(DirectIntoSharedPages, ShortWritesAndReadsPostedAheadStayDirect) {
  Endpoint a = make_endpoint(kBytes), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  std::unique_ptr<Mr> mr;
  register_pages(b, mr);
  fill(a.buffer, 5);
  for (uint64_t id = 1; id <= 20; ++id) {
    Sge from = sge(a, 64 * id, 64);
    ASSERT_EQ(a.qp->post_send(into_pages(WrOpcode::kRdmaWrite, id, from, 64 * id)), 0);
  }
  Sge into = sge(a, 100 * 1024, 4096);
  ASSERT_EQ(a.qp->post_send(into_pages(WrOpcode::kRdmaRead, 21, into, 200 * 1024)), 0);
  EXPECT_EQ(a.qp->counters().direct_operations, 21u);
  EXPECT_TRUE(sent_.empty());
  for (uint64_t id = 1; id <= 21; ++id) {
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(c.status, WcStatus::kSuccess);
  }
  EXPECT_TRUE(std::equal(a.buffer.begin() + 64, a.buffer.begin() + 21 * 64, pages_ + 64));
  EXPECT_EQ(pages_[63], 9);
  EXPECT_EQ(pages_[21 * 64], 9);
  EXPECT_TRUE(std::all_of(a.buffer.begin() + 100 * 1024, a.buffer.begin() + 104 * 1024,
                          [](uint8_t v) { return v == 9; }));
  EXPECT_EQ(b.qp->counters().executed_by_initiators, 21u);
}

TEST_F(DirectIntoSharedPages, AfterDeregistrationTheSharedPagesAreNoLongerReached) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  std::unique_ptr<Mr> mr;
  register_pages(b, mr);
  fill(a.buffer, 5);
  Sge from = sge(a, 0, 64);
  SendRequest write = into_pages(WrOpcode::kRdmaWrite, 1, from, 0);
  ASSERT_EQ(a.qp->post_send(write), 0);  // maps the pages here
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(pages_[0], a.buffer[0]);
  mr.reset();
  std::memset(pages_, 77, kBytes);
  write.wr_id = 2;
  ASSERT_EQ(a.qp->post_send(write), 0);
  run_until_idle();
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.status, WcStatus::kRemAccessErr);
  EXPECT_EQ(a.qp->counters().direct_operations, 1u);
  EXPECT_TRUE(std::all_of(pages_, pages_ + kBytes, [](uint8_t v) { return v == 77; }));
}

// The target's own CPU adds to a word of its shared pages, through its
// own mapping, while FETCH_AND_ADDs executed by the initiator add to it
// through another: both are the processor's atomic instructions on one
// physical word, so no add is lost.
TEST_F(DirectIntoSharedPages, AtomicsAreAtomicAgainstTheTargetsOwnCpu) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  std::unique_ptr<Mr> mr;
  register_pages(b, mr, kAccessRemoteWrite | kAccessRemoteAtomic);
  auto* word = reinterpret_cast<uint64_t*>(pages_ + 128);
  __atomic_store_n(word, 0, __ATOMIC_SEQ_CST);
  constexpr uint64_t kCpuAdds = 2'000'000, kAdds = 20'000;
  std::atomic<bool> go{false};
  std::thread cpu([&] {
    while (!go) {
    }
    for (uint64_t i = 0; i < kCpuAdds; ++i) __atomic_fetch_add(word, 1, __ATOMIC_SEQ_CST);
  });
  go = true;
  Sge result = sge(a, 0, 8);
  for (uint64_t i = 0; i < kAdds; ++i) {
    ASSERT_EQ(a.qp->post_send(atomic(WrOpcode::kAtomicFetchAdd, i, result,
                                     reinterpret_cast<uint64_t>(word), mr->rkey(), 1ull << 32)),
              0);
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    ASSERT_EQ(c.status, WcStatus::kSuccess);
    ASSERT_EQ(word_at(a.buffer, 0) >> 32, i);
  }
  cpu.join();
  EXPECT_EQ(__atomic_load_n(word, __ATOMIC_SEQ_CST), (kAdds << 32) + kCpuAdds);
  EXPECT_EQ(a.qp->counters().direct_operations, kAdds);
}

// An atomic that found its target's pages out of reach (here: the target
// not yet known alive) goes as packets, and so do the next few to that
// R_Key without asking; then it is asked again, so once the pages are in
// reach the atomics are executed directly again, not as packets for the
// QP's life.
TEST_F(DirectIntoSharedPages, AtomicsAfterARefusalThatPassedAreExecutedDirectlyAgain) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  std::unique_ptr<Mr> mr;
  register_pages(b, mr, kAccessRemoteWrite | kAccessRemoteAtomic);
  auto* word = reinterpret_cast<uint64_t*>(pages_ + 64);
  *word = 0;
  Sge result = sge(a, 0, 8);
  auto add_one = [&](uint64_t wr_id) {
    ASSERT_EQ(a.qp->post_send(atomic(WrOpcode::kAtomicFetchAdd, wr_id, result,
                                     reinterpret_cast<uint64_t>(word), mr->rkey(), 1)),
              0);
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    ASSERT_EQ(c.status, WcStatus::kSuccess);
  };
  engine_->same_host().target_table().release_liveness();
  add_one(0);
  engine_->same_host().target_table().hold_liveness();
  EXPECT_EQ(a.qp->counters().direct_operations, 0u) << "the refused one";
  EXPECT_EQ(count_opcode(Opcode::kRcFetchAdd), 1u);
  constexpr uint64_t kAdds = 40;
  for (uint64_t i = 1; i <= kAdds; ++i) add_one(i);
  EXPECT_EQ(*word, kAdds + 1);
  EXPECT_GE(a.qp->counters().direct_operations, kAdds - 8) << "asked again after a few";
  EXPECT_LE(count_opcode(Opcode::kRcFetchAdd), 1u + 8);
}

// An MR of 16 MiB or more keeps its pages at registration
// (deferred_sharing.h): peers reach it by system calls, and the first of
// them asks for the pages, which then move onto a shared file behind the
// program's back while its writes wait and land.
class DirectIntoDeferredPages : public DirectTransport {
 protected:
  static constexpr size_t kBytes = DeferredSharing::kDeferredFrom;
  void SetUp() override {
    DirectTransport::SetUp();
    engine_->same_host().target_table().hold_liveness();
    void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    pages_ = static_cast<uint8_t*>(p);
    std::memset(pages_, 9, kBytes);
  }
  void TearDown() override {
    engine_->same_host().target_table().release_liveness();
    DirectTransport::TearDown();
    munmap(pages_, kBytes);
  }
  void register_pages(Endpoint& b, std::unique_ptr<Mr>& mr,
                      uint32_t remote_access = kAccessRemoteWrite | kAccessRemoteRead) {
    Errno err;
    mr = hca_->register_mr(*b.pd, reinterpret_cast<uint64_t>(pages_), kBytes,
                           kAccessLocalWrite | remote_access, err);
    ASSERT_TRUE(mr) << err;
    ASSERT_FALSE(mr->shared_pages()) << "shared at registration";
    ASSERT_TRUE(mr->sharing_deferred());
  }
  DeferredSharing& sharing() { return engine_->same_host().deferred_sharing(); }
  // Whether `moves` moves have ended within a few seconds.
  bool moved(uint64_t moves) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (sharing().moves() < moves)
      if (std::chrono::steady_clock::now() > give_up) return false;
      else std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return true;
  }
  bool pages_are_a_shared_file() const {
    std::vector<MappedRange> maps = mappings_over(reinterpret_cast<uint64_t>(pages_), kBytes);
    return maps.size() == 1 && maps[0].shared;
  }
  SendRequest into_pages(WrOpcode opcode, uint64_t wr_id, Sge& local, uint64_t offset,
                         const Mr& mr) {
    SendRequest wr = send_of(wr_id, local);
    wr.opcode = opcode;
    wr.remote_addr = reinterpret_cast<uint64_t>(pages_) + offset;
    wr.rkey = mr.rkey();
    return wr;
  }
  SharingPages sharing_{true};
  uint8_t* pages_ = nullptr;
};

TEST_F(DirectIntoDeferredPages, TheFirstAtomicTravelsAsPacketsAndAsksForThePagesForTheNext) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  std::unique_ptr<Mr> mr;
  register_pages(b, mr, kAccessRemoteWrite | kAccessRemoteAtomic);
  auto* word = reinterpret_cast<uint64_t*>(pages_ + kBytes - 64);
  *word = 5;
  Sge result = sge(a, 0, 8);
  auto add_one = [&](uint64_t wr_id) {
    ASSERT_EQ(a.qp->post_send(atomic(WrOpcode::kAtomicFetchAdd, wr_id, result,
                                     reinterpret_cast<uint64_t>(word), mr->rkey(), 1)),
              0);
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    ASSERT_EQ(c.status, WcStatus::kSuccess);
  };
  add_one(0);
  EXPECT_EQ(count_opcode(Opcode::kRcFetchAdd), 1u) << "no system call is atomic";
  ASSERT_TRUE(moved(1)) << "the pages were asked for and never moved";
  EXPECT_TRUE(mr->shared_pages());
  EXPECT_FALSE(mr->sharing_deferred());
  EXPECT_TRUE(pages_are_a_shared_file());
  constexpr uint64_t kAdds = 40;
  for (uint64_t i = 1; i <= kAdds; ++i) add_one(i);
  EXPECT_EQ(*word, 5 + kAdds + 1) << "the program's view of the word";
  EXPECT_GE(a.qp->counters().direct_operations, kAdds - 8) << "executed on the moved pages";
  EXPECT_TRUE(std::all_of(pages_, pages_ + kBytes - 64, [](uint8_t v) { return v == 9; }));
}

// A WRITE reaches the pages by a system call and asks for them; while they
// move, a thread of the program writes on into them, and the next WRITEs
// land too: nothing of either is lost.
TEST_F(DirectIntoDeferredPages, WritesOfTheProgramAndOfThePeerDuringTheMoveAreNotLost) {
  Endpoint a = make_endpoint(64 * 1024), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  std::unique_ptr<Mr> mr;
  register_pages(b, mr);
  // The program writes rounds into the second half, a word at a time.
  const uint64_t kWords = kBytes / 2 / sizeof(uint64_t);
  auto* words = reinterpret_cast<volatile uint64_t*>(pages_ + kBytes / 2);
  std::atomic<bool> stop{false};
  uint64_t last_round = 0, last_word = 0;
  std::thread writer([&] {
    for (uint64_t round = 1;; ++round)
      for (uint64_t w = 0; w < kWords; ++w) {
        words[w] = round;
        if ((w & 63) == 0 && stop.load(std::memory_order_relaxed)) {
          last_round = round;
          last_word = w;
          return;
        }
      }
  });
  const uint64_t held_before = page_move::writes_held();
  fill(a.buffer, 3);
  uint64_t id = 0;
  auto write_at = [&](uint64_t offset) {
    Sge from = sge(a, 0, 64 * 1024);
    ASSERT_EQ(a.qp->post_send(into_pages(WrOpcode::kRdmaWrite, ++id, from, offset, *mr)), 0);
    run_until_idle();
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    ASSERT_EQ(c.status, WcStatus::kSuccess);
  };
  write_at(0);
  // Until the move ended, each lands by a system call, or as packets.
  for (uint64_t offset = 64 * 1024; sharing().moves() == 0 && offset < kBytes / 2;
       offset += 64 * 1024)
    write_at(offset);
  ASSERT_TRUE(moved(1));
  write_at(kBytes / 2 - 64 * 1024);
  stop = true;
  writer.join();
  for (uint64_t w = 0; w < kWords; ++w)
    ASSERT_EQ(words[w], w <= last_word ? last_round : last_round - 1) << "word " << w << " lost";
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.end(), pages_));
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.end(), pages_ + kBytes / 2 - 64 * 1024));
  EXPECT_TRUE(mr->shared_pages());
  EXPECT_GT(page_move::writes_held(), held_before) << "no write met the move: nothing was shown";
}

// Within one process nobody needs the pages shared: its own initiators
// reach them through the program's addresses, and nothing moves.
TEST_F(DirectIntoDeferredPages, InitiatorsOfTheOwnersOwnProcessDoNotAskForThePages) {
  wire_->direct_as_same_process(true);
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  std::unique_ptr<Mr> mr;
  register_pages(b, mr, kAccessRemoteWrite | kAccessRemoteAtomic);
  Sge result = sge(a, 0, 8);
  ASSERT_EQ(a.qp->post_send(atomic(WrOpcode::kAtomicFetchAdd, 1, result,
                                   reinterpret_cast<uint64_t>(pages_), mr->rkey(), 1)),
            0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(a.qp->counters().direct_operations, 1u);
  EXPECT_FALSE(engine_->same_host().target_table().pages_wanted(0, mr->rkey()));
  EXPECT_TRUE(mr->sharing_deferred());
  EXPECT_EQ(sharing().waiting(), 1u);
}

// Deregistered just as a peer asked for its pages: whether the move had
// begun or not, the MR goes, and the pages end private with their bytes.
TEST_F(DirectIntoDeferredPages, DeregisteringWhileThePagesAreAskedForLeavesThemPrivate) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  for (int round = 0; round < 5; ++round) {
    std::unique_ptr<Mr> mr;
    register_pages(b, mr, kAccessRemoteWrite | kAccessRemoteAtomic);
    Sge result = sge(a, 0, 8);
    ASSERT_EQ(a.qp->post_send(atomic(WrOpcode::kAtomicFetchAdd, round, result,
                                     reinterpret_cast<uint64_t>(pages_ + 8), mr->rkey(), 1)),
              0);
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    ASSERT_EQ(c.status, WcStatus::kSuccess);
    std::this_thread::sleep_for(std::chrono::microseconds(round * 300));
    mr.reset();
    EXPECT_FALSE(pages_are_a_shared_file()) << "round " << round;
    EXPECT_EQ(sharing().waiting(), 0u);
  }
  EXPECT_EQ(reinterpret_cast<uint64_t*>(pages_)[1], 0x0909090909090909ull + 5);
}

}  // namespace
}  // namespace softverbs
