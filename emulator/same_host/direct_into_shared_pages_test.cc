// WRITEs, READs and atomics executed by the initiator on the target's
// shared MR pages (shared_pages.h, peer_pages.h) through the transport,
// shared at registration or once a peer reached them
// (deferred_sharing.h).
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
#include "emulator/same_host/direct_transport_fixture.h"
#include "emulator/same_host/target_table.h"

namespace softverbs {
namespace {

using packet::Opcode;

// Pages of the target's own for its MR (only whole pages are shared),
// held by the test, which also stands for the target's life: no progress
// thread holds its liveness page here.
class IntoTargetPages : public DirectTransport {
 protected:
  explicit IntoTargetPages(size_t bytes) : bytes_(bytes) {}
  void SetUp() override {
    DirectTransport::SetUp();
    engine_->same_host().target_table().hold_liveness();
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    pages_ = static_cast<uint8_t*>(p);
    std::memset(pages_, 9, bytes_);
  }
  void TearDown() override {
    engine_->same_host().target_table().release_liveness();
    DirectTransport::TearDown();
    munmap(pages_, bytes_);
  }
  // b's MR over the pages (held by the test, after b's PD).
  void register_over_pages(Endpoint& b, std::unique_ptr<Mr>& mr, uint32_t remote_access) {
    Errno err;
    mr = hca_->register_mr(*b.pd, reinterpret_cast<uint64_t>(pages_), bytes_,
                           kAccessLocalWrite | remote_access, err);
    ASSERT_TRUE(mr) << err;
    rkey_ = mr->rkey();
  }
  // One FETCH_AND_ADD of 1 on `word` of the pages, waited for.
  void add_one(Endpoint& a, uint64_t* word, uint64_t wr_id) {
    Sge result = sge(a, 0, 8);
    ASSERT_EQ(a.qp->post_send(atomic(WrOpcode::kAtomicFetchAdd, wr_id, result,
                                     reinterpret_cast<uint64_t>(word), rkey_, 1)),
              0);
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    ASSERT_EQ(c.status, WcStatus::kSuccess);
  }
  SendRequest into_pages(WrOpcode opcode, uint64_t wr_id, Sge& local, uint64_t offset) {
    SendRequest wr = send_of(wr_id, local);
    wr.opcode = opcode;
    wr.remote_addr = reinterpret_cast<uint64_t>(pages_) + offset;
    wr.rkey = rkey_;
    return wr;
  }
  SharingPages sharing_{true};
  const size_t bytes_;
  uint8_t* pages_ = nullptr;
  uint32_t rkey_ = 0;
};

// The target's MR pages shared (SOFTVERBS_SHARE_MR_PAGES, shared_pages.h):
// the initiator maps them and a direct copy is a memcpy, so a stream of
// short ones stays direct as within one process.
class DirectIntoSharedPages : public IntoTargetPages {
 protected:
  static constexpr size_t kBytes = 256 * 1024;
  DirectIntoSharedPages() : IntoTargetPages(kBytes) {}
  void register_pages(Endpoint& b, std::unique_ptr<Mr>& mr,
                      uint32_t remote_access = kAccessRemoteWrite | kAccessRemoteRead) {
    register_over_pages(b, mr, remote_access);
    ASSERT_TRUE(mr->shared_pages()) << "the target's pages were not shared";
  }
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
  engine_->same_host().target_table().release_liveness();
  add_one(a, word, 0);
  engine_->same_host().target_table().hold_liveness();
  EXPECT_EQ(a.qp->counters().direct_operations, 0u) << "the refused one";
  EXPECT_EQ(count_opcode(Opcode::kRcFetchAdd), 1u);
  constexpr uint64_t kAdds = 40;
  for (uint64_t i = 1; i <= kAdds; ++i) add_one(a, word, i);
  EXPECT_EQ(*word, kAdds + 1);
  EXPECT_GE(a.qp->counters().direct_operations, kAdds - 8) << "asked again after a few";
  EXPECT_LE(count_opcode(Opcode::kRcFetchAdd), 1u + 8);
}

// An MR of 16 MiB or more keeps its pages at registration
// (deferred_sharing.h): peers reach it by system calls, and the first of
// them asks for the pages, which then move onto a shared file behind the
// program's back while its writes wait and land.
class DirectIntoDeferredPages : public IntoTargetPages {
 protected:
  static constexpr size_t kBytes = DeferredSharing::kDeferredFrom;
  DirectIntoDeferredPages() : IntoTargetPages(kBytes) {}
  void register_pages(Endpoint& b, std::unique_ptr<Mr>& mr,
                      uint32_t remote_access = kAccessRemoteWrite | kAccessRemoteRead) {
    register_over_pages(b, mr, remote_access);
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
};

TEST_F(DirectIntoDeferredPages, TheFirstAtomicTravelsAsPacketsAndAsksForThePagesForTheNext) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  std::unique_ptr<Mr> mr;
  register_pages(b, mr, kAccessRemoteWrite | kAccessRemoteAtomic);
  auto* word = reinterpret_cast<uint64_t*>(pages_ + kBytes - 64);
  *word = 5;
  add_one(a, word, 0);
  EXPECT_EQ(count_opcode(Opcode::kRcFetchAdd), 1u) << "no system call is atomic";
  ASSERT_TRUE(moved(1)) << "the pages were asked for and never moved";
  EXPECT_TRUE(mr->shared_pages());
  EXPECT_FALSE(mr->sharing_deferred());
  EXPECT_TRUE(pages_are_a_shared_file());
  constexpr uint64_t kAdds = 40;
  for (uint64_t i = 1; i <= kAdds; ++i) add_one(a, word, i);
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
  fill(a.buffer, 3);
  const uint64_t held_before = page_move::writes_held();
  // Rounds until a write of the program's met the move: on a busy host its
  // thread may not run while the pages move.
  for (uint64_t round = 1; round <= 10 && page_move::writes_held() == held_before; ++round) {
    std::unique_ptr<Mr> mr;
    register_pages(b, mr);
    // The program writes passes into the second half, a word at a time.
    const uint64_t kWords = kBytes / 2 / sizeof(uint64_t);
    auto* words = reinterpret_cast<volatile uint64_t*>(pages_ + kBytes / 2);
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> passes{0};
    uint64_t last_pass = 0, last_word = 0;
    std::thread writer([&] {
      for (uint64_t pass = 1;; ++pass) {
        for (uint64_t w = 0; w < kWords; ++w) {
          words[w] = pass;
          if ((w & 63) == 0 && stop.load(std::memory_order_relaxed)) {
            last_pass = pass;
            last_word = w;
            return;
          }
        }
        passes.store(pass, std::memory_order_relaxed);
      }
    });
    while (passes.load(std::memory_order_relaxed) == 0) std::this_thread::yield();
    uint64_t id = 0;
    auto write_at = [&](uint64_t offset) {
      Sge from = sge(a, 0, 64 * 1024);
      ASSERT_EQ(a.qp->post_send(into_pages(WrOpcode::kRdmaWrite, ++id, from, offset)), 0);
      run_until_idle();
      Completion c;
      ASSERT_TRUE(poll_one(*a.send_cq, c));
      ASSERT_EQ(c.status, WcStatus::kSuccess);
    };
    // The first asks for the pages; until they moved each lands by a
    // system call, or as packets.
    write_at(0);
    for (uint64_t offset = 64 * 1024; sharing().moves() < round && offset < kBytes / 2;
         offset += 64 * 1024)
      write_at(offset);
    ASSERT_TRUE(moved(round));
    write_at(kBytes / 2 - 64 * 1024);
    stop = true;
    writer.join();
    for (uint64_t w = 0; w < kWords; ++w)
      ASSERT_EQ(words[w], w <= last_word ? last_pass : last_pass - 1) << "word " << w << " lost";
    EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.end(), pages_));
    EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.end(), pages_ + kBytes / 2 - 64 * 1024));
    EXPECT_TRUE(mr->shared_pages());
  }
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

// Re-registered before any peer reached it: the deferral starts again
// with the new rights (the old one no longer waits), and the next ask
// moves the pages.
TEST_F(DirectIntoDeferredPages, ReRegistrationDefersSharingAnew) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  std::unique_ptr<Mr> mr;
  register_pages(b, mr);
  ASSERT_EQ(sharing().waiting(), 1u);
  const uint32_t with_atomics = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteAtomic;
  ASSERT_EQ(hca_->reregister_mr(*mr, MrChange{nullptr, nullptr, &with_atomics}), 0);
  EXPECT_EQ(sharing().waiting(), 1u) << "the first deferral was left waiting";
  EXPECT_TRUE(mr->sharing_deferred());
  auto* word = reinterpret_cast<uint64_t*>(pages_ + 64);
  *word = 0;
  add_one(a, word, 1);
  ASSERT_TRUE(moved(1));
  EXPECT_TRUE(mr->shared_pages());
  for (uint64_t i = 2; i <= 20; ++i) add_one(a, word, i);
  EXPECT_EQ(*word, 20u);
  EXPECT_GE(a.qp->counters().direct_operations, 19u - 8) << "executed on the moved pages";
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
