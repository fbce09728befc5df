// Memory registration as an HCA does it, in one process on a loopback pair
// of RC QPs: ibv_reg_mr(3)'s EFAULT for memory the process cannot give
// (the kernel pins it), ibv_rereg_mr(3) with each flag and its error codes,
// ibv_alloc_null_mr(3), on-demand MRs (implicit too) with ibv_advise_mr(3),
// and device memory (ibv_alloc_dm(3)).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "conformance/device_fixture.h"
#include "harness/testsupport/completion_polling.h"
#include "harness/testsupport/registered_buffer.h"

namespace softverbs::conformance {
namespace {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

struct Pages {
  explicit Pages(size_t count, int prot = PROT_READ | PROT_WRITE) : length(count * page_size()) {
    void* p = mmap(nullptr, length, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base = p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  ~Pages() {
    if (base) munmap(base, length);
  }
  uint8_t* base;
  size_t length;
};

class MemoryRegistration : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    if (HasFatalFailure()) return;
    pd_ = alloc_pd();
    cq_ = create_cq(64);
    recv_cq_ = create_cq(64);
    ASSERT_TRUE(pd_ && cq_ && recv_cq_) << describe_errno(last_error_);
    ibv_qp_cap cap{16, 16, 2, 2, 0};
    a_ = create_qp(pd_.get(), cq_.get(), cq_.get(), cap);
    b_ = create_qp(pd_.get(), cq_.get(), recv_cq_.get(), cap);
    ASSERT_TRUE(a_ && b_) << describe_errno(last_error_);
    ASSERT_EQ(0, connect_pair(a_.get(), b_.get()));
  }

  // One signaled WR on a_ with `sges`; its completion's status.
  ibv_wc_status post(ibv_wr_opcode opcode, std::vector<ibv_sge> sges, uint64_t remote_addr = 0,
                     uint32_t rkey = 0) {
    ibv_send_wr wr{};
    wr.wr_id = ++wr_id_;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(0, ibv_post_send(a_.get(), &wr, &bad));
    return wait_for(wr.wr_id);
  }
  void post_recv(std::vector<ibv_sge> sges) {
    ibv_recv_wr wr{};
    wr.wr_id = 1000 + ++wr_id_;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(0, ibv_post_recv(b_.get(), &wr, &bad));
  }
  ibv_wc_status wait_for(uint64_t wr_id) {
    std::vector<ibv_wc> wc;
    while (poll_completions(cq_.get(), 1, wc) == 0)
      if (wc.back().wr_id == wr_id) return wc.back().status;
    ADD_FAILURE() << "no completion for WR " << wr_id;
    return IBV_WC_GENERAL_ERR;
  }
  ibv_wc_status send_and_receive(std::vector<ibv_sge> from, std::vector<ibv_sge> into) {
    post_recv(into);
    EXPECT_EQ(IBV_WC_SUCCESS, post(IBV_WR_SEND, from));
    std::vector<ibv_wc> wc;
    EXPECT_EQ(0, poll_completions(recv_cq_.get(), 1, wc));
    return wc.empty() ? IBV_WC_GENERAL_ERR : wc[0].status;
  }

  PdPtr pd_;
  CqPtr cq_, recv_cq_;  // b_'s receives complete on recv_cq_
  QpPtr a_, b_;
  uint64_t wr_id_ = 0;
};

// ib_umem_get pins the pages (FOLL_WRITE when the MR grants a write):
// EFAULT when they are not there, or not writable.
TEST_F(MemoryRegistration, MemoryTheProcessCannotGiveIsEfault) {
  errno = 0;
  EXPECT_EQ(nullptr, ibv_reg_mr(pd_.get(), nullptr, page_size(), IBV_ACCESS_LOCAL_WRITE));
  EXPECT_EQ(EFAULT, errno);
  void* gone;
  {
    Pages pages(1);
    gone = pages.base;
  }
  errno = 0;
  EXPECT_EQ(nullptr, ibv_reg_mr(pd_.get(), gone, page_size(), IBV_ACCESS_REMOTE_READ));
  EXPECT_EQ(EFAULT, errno);
  Pages read_only(1, PROT_READ);
  MrPtr readable(ibv_reg_mr(pd_.get(), read_only.base, page_size(), IBV_ACCESS_REMOTE_READ));
  EXPECT_TRUE(readable) << describe_errno(errno);
  for (int write : {int{IBV_ACCESS_LOCAL_WRITE}, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC}) {
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_mr(pd_.get(), read_only.base, page_size(), write));
    EXPECT_EQ(EFAULT, errno) << "access " << write;
  }
}

// ib_umem_get pins the pages an MR's bytes lie in and refuses to pin none:
// an MR of length 0 is EINVAL at a page boundary (NULL included) and
// registers at an address inside a page (as on rxe; mlx5 pins the same
// way). It covers no byte: a transfer of 0 bytes through it succeeds.
TEST_F(MemoryRegistration, LengthZeroRegistersOnlyInsideAPage) {
  Pages pages(1);
  ASSERT_TRUE(pages.base);
  for (void* at : {static_cast<void*>(pages.base), static_cast<void*>(nullptr)}) {
    errno = 0;
    EXPECT_EQ(nullptr, ibv_reg_mr(pd_.get(), at, 0, IBV_ACCESS_LOCAL_WRITE)) << at;
    EXPECT_EQ(EINVAL, errno) << at;
  }
  uint8_t* inside = pages.base + 128;
  MrPtr remote(ibv_reg_mr(pd_.get(), inside, 0, kAllAccess));
  ASSERT_TRUE(remote) << describe_errno(errno);
  EXPECT_EQ(0u, remote->length);
  MrPtr local(ibv_reg_mr(pd_.get(), inside, 0, IBV_ACCESS_LOCAL_WRITE));
  ASSERT_TRUE(local) << describe_errno(errno);
  const auto at = reinterpret_cast<uintptr_t>(inside);
  EXPECT_EQ(IBV_WC_SUCCESS,
            send_and_receive({{at, 0, local->lkey}}, {{at, 0, remote->lkey}}));
  EXPECT_EQ(IBV_WC_SUCCESS, post(IBV_WR_RDMA_WRITE, {{at, 0, local->lkey}}, at, remote->rkey));
}

// ibv_reg_mr_iova(3): the MR's bytes are at iova + offset for local SGEs
// and remote addresses alike.
TEST_F(MemoryRegistration, IovaTranslatesLocalAndRemoteAddresses) {
  Pages source(1), target(1);
  const uint64_t iova = 0x7700000000;
  MrPtr src(ibv_reg_mr_iova(pd_.get(), source.base, page_size(), iova, kAllAccess));
  MrPtr dst(ibv_reg_mr_iova(pd_.get(), target.base, page_size(), iova + 0x10000, kAllAccess));
  ASSERT_TRUE(src && dst) << describe_errno(errno);
  for (size_t i = 0; i < 256; ++i) source.base[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(IBV_WC_SUCCESS, post(IBV_WR_RDMA_WRITE, {{iova + 16, 128, src->lkey}},
                                 iova + 0x10000 + 512, dst->rkey));
  EXPECT_EQ(0, std::memcmp(target.base + 512, source.base + 16, 128));
  EXPECT_EQ(IBV_WC_SUCCESS, post(IBV_WR_RDMA_READ, {{iova + 2048, 128, src->lkey}},
                                 iova + 0x10000 + 512, dst->rkey));
  EXPECT_EQ(0, std::memcmp(source.base + 2048, source.base + 16, 128));
}

// The pages stay pinned to the MR when the program unmaps them: a WRITE
// lands in them (a READ gives it back) and never in memory the program
// maps at the same address afterwards.
TEST_F(MemoryRegistration, AWriteAfterTheProgramMapsAnewOverTheMrLandsInTheRegisteredPages) {
  const char* shared = std::getenv("SOFTVERBS_SHARE_MR_PAGES");
  if (shared && !std::strcmp(shared, "0"))
    GTEST_SKIP() << "SOFTVERBS_SHARE_MR_PAGES=0: softverbs then reaches the program's current "
                    "mapping, not pinned pages";
  Pages target(2), source(1), back(1);
  MrPtr mr(ibv_reg_mr(pd_.get(), target.base, 2 * page_size(), kAllAccess));
  MrPtr src(ibv_reg_mr(pd_.get(), source.base, page_size(), kAllAccess));
  MrPtr dst(ibv_reg_mr(pd_.get(), back.base, page_size(), kAllAccess));
  ASSERT_TRUE(mr && src && dst) << describe_errno(errno);
  ASSERT_EQ(0, munmap(target.base, target.length));
  void* anew = mmap(target.base, target.length, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(static_cast<void*>(target.base), anew) << "the address was taken meanwhile";
  std::memset(source.base, 0x5e, 256);
  const auto at = reinterpret_cast<uintptr_t>(target.base) + page_size() - 128;
  EXPECT_EQ(IBV_WC_SUCCESS,
            post(IBV_WR_RDMA_WRITE, {{(uintptr_t)source.base, 256, src->lkey}}, at, mr->rkey));
  for (size_t i = 0; i < target.length; ++i)
    ASSERT_EQ(0, target.base[i]) << "the WRITE reached the new mapping at byte " << i;
  EXPECT_EQ(IBV_WC_SUCCESS,
            post(IBV_WR_RDMA_READ, {{(uintptr_t)back.base, 256, dst->lkey}}, at, mr->rkey));
  EXPECT_EQ(0, std::memcmp(back.base, source.base, 256)) << "the registered pages lost the WRITE";
}

// Registration changes nothing the program sees: another thread writing
// into the buffer all along while it is registered and deregistered a
// thousand times loses no write (softverbs moves the pages of an MR it
// shares with peers; the writes meanwhile wait and land).
TEST_F(MemoryRegistration, WritesOfAnotherThreadDuringRegistrationAreKept) {
  Pages pages(2);
  ASSERT_TRUE(pages.base);
  const size_t words = pages.length / sizeof(uint64_t);
  auto* word = reinterpret_cast<volatile uint64_t*>(pages.base);
  std::atomic<bool> stop{false};
  uint64_t last_round = 0, last_word = 0;
  std::thread writer([&] {
    for (uint64_t round = 1;; ++round)
      for (uint64_t w = 0; w < words; ++w) {
        word[w] = round;
        if ((w & 63) == 0 && stop.load(std::memory_order_relaxed)) {
          last_round = round;
          last_word = w;
          return;
        }
      }
  });
  for (int i = 0; i < 1000 && !HasFailure(); ++i) {
    MrPtr mr(ibv_reg_mr(pd_.get(), pages.base, pages.length, kAllAccess));
    EXPECT_TRUE(mr) << "registration " << i << ": " << describe_errno(errno);
  }
  stop = true;
  writer.join();
  // Words up to the one it stopped at hold its last round, the rest the one before.
  for (uint64_t w = 0; w < words; ++w)
    ASSERT_EQ(word[w], w <= last_word ? last_round : last_round - 1)
        << "word " << w << " lost a write";
}

TEST_F(MemoryRegistration, ReregPdTakesTheMrOutOfTheQpsReach) {
  Pages first(1);
  MrPtr mr(ibv_reg_mr(pd_.get(), first.base, page_size(), kAllAccess));
  ASSERT_TRUE(mr);
  PdPtr other = alloc_pd();
  ASSERT_EQ(0, ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_PD, other.get(), nullptr, 0, 0));
  EXPECT_EQ(other.get(), mr->pd);
  // In another PD than the QPs: no longer reachable through them.
  Pages source(1);
  MrPtr src(ibv_reg_mr(pd_.get(), source.base, page_size(), kAllAccess));
  EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, post(IBV_WR_RDMA_WRITE, {{(uintptr_t)source.base, 64,
                                                            src->lkey}},
                                        (uintptr_t)first.base, mr->rkey));
}

TEST_F(MemoryRegistration, ReregTranslationMovesTheBytes) {
  Pages first(1), second(1), source(1);
  MrPtr mr(ibv_reg_mr(pd_.get(), first.base, page_size(), kAllAccess));
  MrPtr src(ibv_reg_mr(pd_.get(), source.base, page_size(), kAllAccess));
  ASSERT_TRUE(mr && src);
  const int result = ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_TRANSLATION, nullptr,
                                  second.base, page_size(), 0);
  if (result == IBV_REREG_MR_ERR_CMD && errno == EOPNOTSUPP)
    GTEST_SKIP() << "the device cannot change an MR's translation";
  ASSERT_EQ(0, result) << describe_errno(errno);
  EXPECT_EQ(second.base, mr->addr);
  EXPECT_EQ(page_size(), mr->length);
  std::memset(source.base, 0x3c, 64);
  EXPECT_EQ(IBV_WC_SUCCESS, post(IBV_WR_RDMA_WRITE, {{(uintptr_t)source.base, 64, src->lkey}},
                                 (uintptr_t)second.base, mr->rkey));
  EXPECT_EQ(0x3c, second.base[63]);
  EXPECT_EQ(0, first.base[0]);
}

TEST_F(MemoryRegistration, ReregAccessTakesARightAway) {
  Pages target(1), source(1);
  MrPtr mr(ibv_reg_mr(pd_.get(), target.base, page_size(), kAllAccess));
  MrPtr src(ibv_reg_mr(pd_.get(), source.base, page_size(), kAllAccess));
  ASSERT_TRUE(mr && src);
  ASSERT_EQ(0, ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
  EXPECT_EQ(IBV_WC_REM_ACCESS_ERR, post(IBV_WR_RDMA_WRITE, {{(uintptr_t)source.base, 64,
                                                            src->lkey}},
                                        (uintptr_t)target.base, mr->rkey));
}

// What libibverbs refuses itself is IBV_REREG_MR_ERR_INPUT (the MR as it
// was); what the command refuses, IBV_REREG_MR_ERR_CMD. errno says why.
TEST_F(MemoryRegistration, ReregErrorCodes) {
  Pages memory(1), read_only(1, PROT_READ);
  MrPtr mr(ibv_reg_mr(pd_.get(), memory.base, page_size(), IBV_ACCESS_LOCAL_WRITE));
  ASSERT_TRUE(mr);
  auto expect = [&](int flags, void* addr, size_t length, int access, int result, int err,
                    const char* what) {
    errno = 0;
    EXPECT_EQ(result, ibv_rereg_mr(mr.get(), flags, nullptr, addr, length, access)) << what;
    EXPECT_EQ(err, errno) << what;
  };
  expect(1 << 5, nullptr, 0, 0, IBV_REREG_MR_ERR_INPUT, EINVAL, "an unknown flag");
  expect(IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, page_size(), 0, IBV_REREG_MR_ERR_INPUT, EINVAL,
         "a new translation at NULL");
  expect(IBV_REREG_MR_CHANGE_TRANSLATION, memory.base, 0, 0, IBV_REREG_MR_ERR_INPUT, EINVAL,
         "a new translation of length 0");
  expect(0, nullptr, 0, IBV_ACCESS_LOCAL_WRITE, IBV_REREG_MR_ERR_INPUT, EINVAL,
         "access without IBV_REREG_MR_CHANGE_ACCESS");
  expect(0, nullptr, 0, 0, IBV_REREG_MR_ERR_CMD, EINVAL, "no change at all");
  expect(IBV_REREG_MR_CHANGE_ACCESS, nullptr, 0, IBV_ACCESS_REMOTE_WRITE, IBV_REREG_MR_ERR_CMD,
         EINVAL, "remote write without local write");
  errno = 0;
  const int result = ibv_rereg_mr(mr.get(), IBV_REREG_MR_CHANGE_TRANSLATION, nullptr,
                                  read_only.base, page_size(), 0);
  if (!(result == IBV_REREG_MR_ERR_CMD && errno == EOPNOTSUPP)) {
    EXPECT_EQ(IBV_REREG_MR_ERR_CMD, result) << "writable MR moved onto read-only memory";
    EXPECT_EQ(EFAULT, errno);
  }
}

// ibv_alloc_null_mr(3): reads give zeros, writes are dropped, lkey only.
TEST_F(MemoryRegistration, NullMrSourcesZerosAndDropsWrites) {
  errno = 0;
  MrPtr null_mr(ibv_alloc_null_mr(pd_.get()));
  if (!null_mr && (errno == EOPNOTSUPP || errno == ENOTSUP))
    GTEST_SKIP() << "the device has no null MR";
  ASSERT_TRUE(null_mr) << describe_errno(errno);
  Pages memory(1);
  MrPtr mr(ibv_reg_mr(pd_.get(), memory.base, page_size(), kAllAccess));
  ASSERT_TRUE(mr);
  std::memset(memory.base, 0xee, page_size());
  const uint64_t base = reinterpret_cast<uintptr_t>(memory.base);
  // 64 zeros then 64 bytes of 0xee; received as 64 dropped then 64 kept.
  EXPECT_EQ(IBV_WC_SUCCESS,
            send_and_receive({{0x1000, 64, null_mr->lkey}, {base, 64, mr->lkey}},
                             {{0x2000, 64, null_mr->lkey}, {base + 2048, 64, mr->lkey}}));
  EXPECT_EQ(0xee, memory.base[2048]);
  // Kept first: the zeros land.
  EXPECT_EQ(IBV_WC_SUCCESS,
            send_and_receive({{0x1000, 64, null_mr->lkey}, {base, 64, mr->lkey}},
                             {{base + 2048, 64, mr->lkey}, {0x2000, 64, null_mr->lkey}}));
  EXPECT_EQ(0, memory.base[2048]);
  EXPECT_EQ(0, memory.base[2048 + 63]);
  errno = 0;
  EXPECT_EQ(IBV_REREG_MR_ERR_INPUT, ibv_rereg_mr(null_mr.get(), IBV_REREG_MR_CHANGE_ACCESS,
                                                 nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE));
  EXPECT_EQ(EINVAL, errno);
}

}  // namespace
}  // namespace softverbs::conformance
