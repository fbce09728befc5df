// MRs as an HCA has them: registration checks of the memory, addresses
// through an iova, null MRs, re-registration, prefetch, device memory, and
// memory unmapped under a registered MR.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "emulator/objects/hca_impl.h"
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

constexpr uint32_t kAllAccess =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

struct Mapping {
  explicit Mapping(size_t bytes, int prot = PROT_READ | PROT_WRITE) : length(bytes) {
    void* p = mmap(nullptr, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    base = static_cast<uint8_t*>(p);
  }
  ~Mapping() {
    if (base) munmap(base, length);
  }
  void unmap() {
    munmap(base, length);
    base = nullptr;
  }
  uint64_t addr() const { return reinterpret_cast<uint64_t>(base); }
  uint8_t* base;
  size_t length;
};

using MemoryRegion = Transport;

// ib_umem_get's pinning, which softverbs does not do, fails these.
TEST_F(MemoryRegion, RegistrationOfMemoryNotThereIsEfault) {
  Errno err = 0;
  auto pd = hca_->alloc_pd(err);
  EXPECT_FALSE(hca_->register_mr(*pd, 0, 4096, kAccessLocalWrite, err));
  EXPECT_EQ(err, EFAULT);
  Mapping gone(page_size());
  const uint64_t where = gone.addr();
  gone.unmap();
  EXPECT_FALSE(hca_->register_mr(*pd, where, page_size(), 0, err));
  EXPECT_EQ(err, EFAULT);
  Mapping read_only(page_size(), PROT_READ);
  EXPECT_TRUE(hca_->register_mr(*pd, read_only.addr(), page_size(), kAccessRemoteRead, err));
  for (uint32_t write : {uint32_t{kAccessLocalWrite}, kAccessLocalWrite | kAccessRemoteWrite,
                         kAccessLocalWrite | kAccessRemoteAtomic}) {
    EXPECT_FALSE(hca_->register_mr(*pd, read_only.addr(), page_size(), write, err));
    EXPECT_EQ(err, EFAULT);
  }
  // On demand, nothing need be there yet.
  EXPECT_TRUE(hca_->register_mr(*pd, MrInit{where, page_size(), where, kAllAccess, true}, err));
}

// Keys have 24-bit indices: once the counter wraps, the index of an MR
// still registered is not handed out again.
TEST_F(MemoryRegion, KeysSkipIndicesStillHeldAfterTheCounterWraps) {
  Errno err = 0;
  auto pd = hca_->alloc_pd(err);
  std::vector<uint8_t> bytes(64);
  const auto addr = reinterpret_cast<uint64_t>(bytes.data());
  auto held = hca_->register_mr(*pd, addr, bytes.size(), kAccessLocalWrite, err);
  ASSERT_TRUE(held) << err;
  auto window = hca_->alloc_mw(*pd, MwType::kType2, err);
  ASSERT_TRUE(window) << err;
  {
    std::unique_lock lock(hca_->impl().mr_mutex);
    hca_->impl().next_key_index = (held->lkey() >> 8) + (1u << 24);  // wrapped onto it
  }
  auto next = hca_->register_mr(*pd, addr, bytes.size(), kAccessLocalWrite, err);
  ASSERT_TRUE(next) << err;
  EXPECT_NE(next->lkey() >> 8, held->lkey() >> 8);
  EXPECT_NE(next->lkey() >> 8, window->index());
  std::unique_lock lock(hca_->impl().mr_mutex);
  EXPECT_EQ(hca_->impl().find_mr_locked(held->lkey()), held.get());
  EXPECT_EQ(hca_->impl().find_mr_locked(next->lkey()), next.get());
}

// Remote and local addresses are the MR's own: host = addr + (va - iova).
TEST_F(MemoryRegion, AddressesGoThroughTheIova) {
  Endpoint a = make_endpoint(256), b = make_endpoint(256);
  connect(a, b, 0, 0);
  Errno err;
  auto b_mr = hca_->register_mr(*b.pd, MrInit{reinterpret_cast<uint64_t>(b.buffer.data()), 256,
                                              0x7000000000, kAllAccess, false}, err);
  auto a_mr = hca_->register_mr(*a.pd, MrInit{reinterpret_cast<uint64_t>(a.buffer.data()), 256,
                                              0, kAllAccess, false}, err);
  ASSERT_TRUE(b_mr && a_mr);
  fill(a.buffer, 3);
  Sge s{16, 32, a_mr->lkey()};  // a's bytes 16..47, zero-based
  SendRequest wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.flags = kWrSignaled;
  wr.remote_addr = 0x7000000000 + 100;
  wr.rkey = b_mr->rkey();
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(b.buffer.data() + 100, a.buffer.data() + 16, 32), 0);
  // The host address of b's buffer means nothing through this MR.
  wr.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data());
  ASSERT_EQ(a.qp->post_send(wr), 0);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kRemAccessErr);
}

// A peer's RDMA to an MR whose memory was unmapped after registration is a
// remote access error for the peer, and the owner goes on.
TEST_F(MemoryRegion, AccessToUnmappedMemoryIsARemoteAccessError) {
  for (WrOpcode op : {WrOpcode::kRdmaWrite, WrOpcode::kRdmaRead, WrOpcode::kAtomicFetchAdd}) {
    Endpoint a = make_endpoint(4096), b = make_endpoint(64);
    connect(a, b, 0, 0);
    Mapping target(page_size());
    Errno err;
    auto mr = hca_->register_mr(*b.pd, target.addr(), page_size(), kAllAccess, err);
    ASSERT_TRUE(mr);
    target.unmap();
    Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), op == WrOpcode::kAtomicFetchAdd ? 8u : 2048u,
          a.mr->lkey()};
    SendRequest wr;
    wr.opcode = op;
    wr.flags = kWrSignaled;
    wr.remote_addr = target.addr() + 64;
    wr.rkey = mr->rkey();
    wr.sges = {&s, 1};
    ASSERT_EQ(a.qp->post_send(wr), 0);
    Completion c;
    ASSERT_TRUE(poll_one(*a.send_cq, c));
    EXPECT_EQ(c.status, WcStatus::kRemAccessErr) << static_cast<int>(op);
  }
}

// ibv_alloc_null_mr(3): reads give zeros, writes are dropped, no rkey.
TEST_F(MemoryRegion, NullMrSendsZerosAndDropsWhatItReceives) {
  Endpoint a = make_endpoint(128), b = make_endpoint(128);
  connect(a, b, 0, 0);
  Errno err;
  auto a_null = hca_->register_null_mr(*a.pd, err);
  auto b_null = hca_->register_null_mr(*b.pd, err);
  ASSERT_TRUE(a_null && b_null);
  EXPECT_EQ(a_null->rkey(), 0u);
  fill(b.buffer, 9);
  Sge drop{0x1234, 64, b_null->lkey()};
  Sge keep{reinterpret_cast<uint64_t>(b.buffer.data()), 64, b.mr->lkey()};
  Sge into[] = {drop, keep};
  ASSERT_EQ(b.qp->post_recv(RecvRequest{1, into}), 0);
  Sge zeros{0xdead0000, 64, a_null->lkey()};
  Sge data{reinterpret_cast<uint64_t>(a.buffer.data()), 64, a.mr->lkey()};
  fill(a.buffer, 1);
  Sge from[] = {zeros, data};
  SendRequest send;
  send.opcode = WrOpcode::kSend;
  send.flags = kWrSignaled;
  send.sges = from;
  ASSERT_EQ(a.qp->post_send(send), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  // b's real buffer got a's real bytes; the zeros went to the null MR.
  EXPECT_EQ(std::memcmp(b.buffer.data(), a.buffer.data(), 64), 0);
  // Swapped: the zeros land in b's buffer.
  Sge first_real[] = {keep, drop};
  ASSERT_EQ(b.qp->post_recv(RecvRequest{2, first_real}), 0);
  ASSERT_EQ(a.qp->post_send(send), 0);
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(std::count(b.buffer.begin(), b.buffer.begin() + 64, 0), 64);
}

TEST_F(MemoryRegion, ReregistrationMovesTheMemoryAndKeepsTheKeys) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0);
  Mapping first(page_size()), second(page_size());
  Errno err;
  auto mr = hca_->register_mr(*b.pd, first.addr(), page_size(), kAllAccess, err);
  ASSERT_TRUE(mr);
  const uint32_t rkey = mr->rkey();
  const MrInit moved{second.addr(), page_size(), second.addr(), 0, false};
  ASSERT_EQ(hca_->reregister_mr(*mr, MrChange{nullptr, &moved}), 0);
  EXPECT_EQ(mr->rkey(), rkey);
  fill(a.buffer, 5);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 64, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.flags = kWrSignaled;
  wr.remote_addr = second.addr();
  wr.rkey = rkey;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(second.base, a.buffer.data(), 64), 0);
  // Without remote write now: refused.
  const uint32_t read_only = kAccessLocalWrite | kAccessRemoteRead;
  ASSERT_EQ(hca_->reregister_mr(*mr, MrChange{nullptr, nullptr, &read_only}), 0);
  ASSERT_EQ(a.qp->post_send(wr), 0);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kRemAccessErr);
}

TEST_F(MemoryRegion, ReregistrationRefusalsChangeNothing) {
  Errno err;
  auto pd = hca_->alloc_pd(err);
  Mapping m(page_size()), read_only(page_size(), PROT_READ);
  auto mr = hca_->register_mr(*pd, m.addr(), page_size(), kAccessLocalWrite, err);
  ASSERT_TRUE(mr);
  const uint32_t bad = kAccessRemoteWrite;  // without local write
  EXPECT_EQ(hca_->reregister_mr(*mr, MrChange{nullptr, nullptr, &bad}), EINVAL);
  const MrInit onto_read_only{read_only.addr(), page_size(), read_only.addr(), 0, false};
  EXPECT_EQ(hca_->reregister_mr(*mr, MrChange{nullptr, &onto_read_only}), EFAULT);
  EXPECT_EQ(mr->addr(), m.addr());
  EXPECT_EQ(mr->access(), kAccessLocalWrite);
  auto null_mr = hca_->register_null_mr(*pd, err);
  const uint32_t local = kAccessLocalWrite;
  EXPECT_EQ(hca_->reregister_mr(*null_mr, MrChange{nullptr, nullptr, &local}), EINVAL);
}

TEST_F(MemoryRegion, PrefetchFollowsTheRulesOfMlx5) {
  Errno err;
  auto pd = hca_->alloc_pd(err), other = hca_->alloc_pd(err);
  Mapping m(2 * page_size());
  auto odp = hca_->register_mr(*pd, MrInit{m.addr(), 2 * page_size(), m.addr(),
                                           kAccessRemoteRead, true}, err);
  auto pinned = hca_->register_mr(*pd, m.addr(), page_size(), kAccessLocalWrite, err);
  ASSERT_TRUE(odp && pinned);
  Sge all{m.addr(), static_cast<uint32_t>(2 * page_size()), odp->lkey()};
  EXPECT_EQ(hca_->prefetch_mr(*pd, {&all, 1}, Prefetch::kRead, true), 0);
  EXPECT_EQ(hca_->prefetch_mr(*pd, {&all, 1}, Prefetch::kWrite, true), EPERM);
  EXPECT_EQ(hca_->prefetch_mr(*other, {&all, 1}, Prefetch::kRead, true), EPERM);
  Sge past{m.addr() + page_size(), static_cast<uint32_t>(2 * page_size()), odp->lkey()};
  EXPECT_EQ(hca_->prefetch_mr(*pd, {&past, 1}, Prefetch::kRead, true), EFAULT);
  Sge not_odp{m.addr(), 64, pinned->lkey()};
  EXPECT_EQ(hca_->prefetch_mr(*pd, {&not_odp, 1}, Prefetch::kRead, true), ENOENT);
  munmap(m.base + page_size(), page_size());
  EXPECT_EQ(hca_->prefetch_mr(*pd, {&all, 1}, Prefetch::kRead, true), EFAULT);
  EXPECT_EQ(hca_->prefetch_mr(*pd, {&all, 1}, Prefetch::kRead, false), 0);  // best effort
  EXPECT_EQ(hca_->prefetch_mr(*pd, {&all, 1}, Prefetch::kNoFault, true), 0);
}

TEST_F(MemoryRegion, DeviceMemoryLimitsAndCopies) {
  Errno err;
  const uint64_t max = hca_->attributes().max_dm_size;
  EXPECT_FALSE(hca_->alloc_device_memory(0, 0, err));
  EXPECT_EQ(err, EINVAL);
  EXPECT_FALSE(hca_->alloc_device_memory(max + 1, 0, err));
  EXPECT_EQ(err, EINVAL);
  auto most = hca_->alloc_device_memory(max - page_size(), 0, err);
  ASSERT_TRUE(most);
  EXPECT_FALSE(hca_->alloc_device_memory(2 * page_size(), 0, err));
  EXPECT_EQ(err, ENOMEM);
  auto dm = hca_->alloc_device_memory(64, 6, err);
  ASSERT_TRUE(dm);
  uint32_t words[4] = {1, 2, 3, 4}, back[4] = {};
  EXPECT_EQ(dm->copy_in(48, words, 16), 0);
  EXPECT_EQ(dm->copy_in(56, words, 16), EFAULT);
  EXPECT_EQ(dm->copy_in(2, words, 4), EINVAL);
  EXPECT_EQ(dm->copy_out(back, 48, 16), 0);
  EXPECT_EQ(std::memcmp(words, back, 16), 0);
  most.reset();
  EXPECT_TRUE(hca_->alloc_device_memory(2 * page_size(), 0, err));
}

// A DM MR is zero-based and takes a peer's RDMA like any MR.
TEST_F(MemoryRegion, DeviceMemoryIsAnRdmaTarget) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0);
  Errno err;
  auto dm = hca_->alloc_device_memory(256, 0, err);
  ASSERT_TRUE(dm);
  EXPECT_FALSE(hca_->register_device_memory_mr(*b.pd, *dm, 200, 100, kAllAccess, err));
  EXPECT_EQ(err, EINVAL);
  auto mr = hca_->register_device_memory_mr(*b.pd, *dm, 128, 128, kAllAccess, err);
  ASSERT_TRUE(mr);
  EXPECT_EQ(dm->users.load(), 1u);
  fill(a.buffer, 7);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 64, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.flags = kWrSignaled;
  wr.remote_addr = 8;  // zero-based: byte 8 of the MR, 136 of the DM
  wr.rkey = mr->rkey();
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  uint8_t back[64];
  ASSERT_EQ(dm->copy_out(back, 136, 64), 0);
  EXPECT_EQ(std::memcmp(back, a.buffer.data(), 64), 0);
  mr.reset();
  EXPECT_EQ(dm->users.load(), 0u);
}

}  // namespace
}  // namespace softverbs
