// Memory windows (IBTA 10.6.7; ibv_alloc_mw(3), ibv_bind_mw(3),
// ibv_post_send(3)), two processes: the test process owns the windows on its
// buffer and binds them; the peer reaches that buffer through them. A
// window grants its own rights over its own range; type 1 windows are bound
// with ibv_bind_mw (and any QP of the PD reaches them), type 2 windows with
// a posted WR, to the posting QP, under a key the binder chooses, and are
// freed by IBV_WR_LOCAL_INV or by the peer's SEND with invalidate, after
// which the peer's RDMA with the old key is a remote access error. Binds
// that break a rule complete with IBV_WC_MW_BIND_ERR. Skipped on devices
// without memory windows.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/device.h"

namespace softverbs::conformance {
namespace {

constexpr uint32_t kWindowOffset = 64 * 1024;  // where windows start in the buffer
constexpr uint32_t kWindowLength = 16 * 1024;
constexpr int kRemoteRights = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

struct MwDeallocator {
  void operator()(ibv_mw* mw) const { ibv_dealloc_mw(mw); }
};
using MwPtr = std::unique_ptr<ibv_mw, MwDeallocator>;

bool device_has_windows(int type) {
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  ibv_device_attr attr{};
  if (!context || ibv_query_device(context.get(), &attr)) return false;
  const int type_flag = type == 1 ? 0 : IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  return attr.max_mw > 0 && (attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&
         (attr.device_cap_flags & type_flag) == static_cast<unsigned>(type_flag);
}

// The local buffer may have windows bound to it.
PairOptions window_options() {
  PairOptions options = symmetric_options();
  options.local.buffer_access |= IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_ATOMIC;
  return options;
}

ibv_mw_bind_info window_on(const Endpoint& local, uint64_t offset, uint64_t length, int access,
                           ibv_mr* mr = nullptr) {
  ibv_mw_bind_info info{};
  info.mr = mr ? mr : local.buffer().mr();
  info.addr = local.buffer().mr_address() + offset;
  info.length = length;
  info.mw_access_flags = static_cast<unsigned>(access);
  return info;
}

// A signaled IBV_WR_BIND_MW of type 2 window `mw` under `rkey`; its completion.
ibv_wc bind_type2(Endpoint& local, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info& info) {
  ibv_send_wr wr{};
  wr.wr_id = 70;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info = info;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(0, ibv_post_send(local.qp(), &wr, &bad));
  std::vector<ibv_wc> wc;
  EXPECT_EQ(0, local.poll(Queue::kSend, 1, wc));
  return wc.empty() ? ibv_wc{} : wc[0];
}

// A signaled ibv_wr_bind_mw of type 2 window `mw` under `rkey` (a QP with
// the builders), as WR `wr_id`; its completion.
ibv_wc bind_type2_by_builder(Endpoint& local, ibv_mw* mw, uint32_t rkey,
                             const ibv_mw_bind_info& info, uint64_t wr_id) {
  ibv_qp_ex* qpx = local.qp_ex();
  EXPECT_NE(qpx, nullptr);
  if (!qpx) return ibv_wc{};
  ibv_wr_start(qpx);
  qpx->wr_id = wr_id;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(qpx, mw, rkey, &info);
  EXPECT_EQ(0, ibv_wr_complete(qpx));
  std::vector<ibv_wc> wc;
  EXPECT_EQ(0, local.poll(Queue::kSend, 1, wc));
  return wc.empty() ? ibv_wc{} : wc[0];
}

// ibv_bind_mw of type 1 window `mw`; its completion.
ibv_wc bind_type1(Endpoint& local, ibv_mw* mw, const ibv_mw_bind_info& info) {
  ibv_mw_bind bind{};
  bind.wr_id = 60;
  bind.send_flags = IBV_SEND_SIGNALED;
  bind.bind_info = info;
  EXPECT_EQ(0, ibv_bind_mw(local.qp(), mw, &bind));
  std::vector<ibv_wc> wc;
  EXPECT_EQ(0, local.poll(Queue::kSend, 1, wc));
  return wc.empty() ? ibv_wc{} : wc[0];
}

// The peer's signaled `opcode` of `length` bytes at `address` through
// `rkey`; the status it completed with.
ibv_wc_status peer_rdma(RemoteEndpoint& remote, ibv_wr_opcode opcode, uint32_t rkey,
                        uint64_t address, uint32_t length) {
  SendSpec spec;
  spec.wr_id = 9;
  spec.opcode = opcode;
  spec.length = length;
  spec.target = RemoteTarget::kGivenKey;
  spec.rkey = rkey;
  spec.remote_offset = address;
  if (remote.post_send(spec) != 0) return IBV_WC_GENERAL_ERR;
  std::vector<ibv_wc> wc;
  if (remote.poll(Queue::kSend, 1, wc) != 0 || wc.empty()) return IBV_WC_GENERAL_ERR;
  return wc[0].status;
}

void expect_status(ibv_wc_status expected, ibv_wc_status got, const char* what) {
  EXPECT_EQ(expected, got) << what << ": expected " << ibv_wc_status_str(expected) << ", got "
                           << ibv_wc_status_str(got);
}

TEST(MemoryWindow, AllocationGivesEachWindowItsOwnKey) {
  if (!device_has_windows(1)) GTEST_SKIP() << "the device has no memory windows";
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  ASSERT_TRUE(context) << strerror(err);
  PdPtr pd(ibv_alloc_pd(context.get()));
  ASSERT_TRUE(pd);
  MwPtr one(ibv_alloc_mw(pd.get(), IBV_MW_TYPE_1));
  ASSERT_TRUE(one) << strerror(errno);
  EXPECT_EQ(one->type, IBV_MW_TYPE_1);
  EXPECT_EQ(one->pd, pd.get());
  if (device_has_windows(2)) {
    MwPtr two(ibv_alloc_mw(pd.get(), IBV_MW_TYPE_2));
    ASSERT_TRUE(two) << strerror(errno);
    EXPECT_EQ(two->type, IBV_MW_TYPE_2);
    EXPECT_NE(one->rkey, two->rkey);
  }
  errno = 0;
  EXPECT_EQ(nullptr, ibv_alloc_mw(pd.get(), static_cast<ibv_mw_type>(3)));
  EXPECT_EQ(EINVAL, errno);
  // A PD with a window cannot go.
  EXPECT_EQ(EBUSY, ibv_dealloc_pd(pd.get()));
}

TEST(MemoryWindow, TypeOneGrantsItsRangeAndRightsToThePeer) {
  if (!device_has_windows(1)) GTEST_SKIP() << "the device has no memory windows";
  with_connected_pair(window_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    MwPtr mw(ibv_alloc_mw(local.pd(), IBV_MW_TYPE_1));
    ASSERT_TRUE(mw) << strerror(errno);
    const uint32_t allocated = mw->rkey;
    const ibv_wc wc = bind_type1(local, mw.get(),
                                 window_on(local, kWindowOffset, kWindowLength, kRemoteRights));
    expect_completion(wc, 60, IBV_WC_SUCCESS, "ibv_bind_mw");
    EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
    EXPECT_NE(mw->rkey, allocated) << "a bind gives the window a new key";
    const uint64_t start = local.buffer().mr_address() + kWindowOffset;
    ASSERT_EQ(0, remote.fill(0, kWindowLength, 31)) << remote.why();
    expect_status(IBV_WC_SUCCESS,
                  peer_rdma(remote, IBV_WR_RDMA_WRITE, mw->rkey, start, kWindowLength),
                  "the peer's WRITE through the window");
    EXPECT_FALSE(local.check(kWindowOffset, kWindowLength, 31)) << "the WRITE did not land";
    expect_status(IBV_WC_SUCCESS,
                  peer_rdma(remote, IBV_WR_RDMA_READ, mw->rkey, start + 4096, 4096),
                  "the peer's READ through the window");
    // One byte past the window: its MR would allow it, the window does not.
    expect_status(IBV_WC_REM_ACCESS_ERR,
                  peer_rdma(remote, IBV_WR_RDMA_WRITE, mw->rkey, start + kWindowLength - 8, 16),
                  "a WRITE running past the window");
  });
}

TEST(MemoryWindow, ABindReplacesTheTypeOneKeyAndRights) {
  if (!device_has_windows(1)) GTEST_SKIP() << "the device has no memory windows";
  with_connected_pair(window_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    MwPtr mw(ibv_alloc_mw(local.pd(), IBV_MW_TYPE_1));
    ASSERT_TRUE(mw);
    expect_completion(bind_type1(local, mw.get(),
                                 window_on(local, kWindowOffset, kWindowLength, kRemoteRights)),
                      60, IBV_WC_SUCCESS, "the first bind");
    const uint32_t first_key = mw->rkey;
    // Bound again, read only.
    expect_completion(bind_type1(local, mw.get(), window_on(local, kWindowOffset, kWindowLength,
                                                            IBV_ACCESS_REMOTE_READ)),
                      60, IBV_WC_SUCCESS, "the second bind");
    EXPECT_NE(mw->rkey, first_key);
    const uint64_t start = local.buffer().mr_address() + kWindowOffset;
    expect_status(IBV_WC_SUCCESS, peer_rdma(remote, IBV_WR_RDMA_READ, mw->rkey, start, 64),
                  "a READ the new binding allows");
    expect_status(IBV_WC_REM_ACCESS_ERR,
                  peer_rdma(remote, IBV_WR_RDMA_WRITE, mw->rkey, start, 64),
                  "a WRITE the new binding does not allow");
  });
  with_connected_pair(window_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    MwPtr mw(ibv_alloc_mw(local.pd(), IBV_MW_TYPE_1));
    ASSERT_TRUE(mw);
    expect_completion(bind_type1(local, mw.get(),
                                 window_on(local, kWindowOffset, kWindowLength, kRemoteRights)),
                      60, IBV_WC_SUCCESS, "the first bind");
    const uint32_t first_key = mw->rkey;
    expect_completion(bind_type1(local, mw.get(),
                                 window_on(local, kWindowOffset, kWindowLength, kRemoteRights)),
                      60, IBV_WC_SUCCESS, "the second bind");
    expect_status(IBV_WC_REM_ACCESS_ERR,
                  peer_rdma(remote, IBV_WR_RDMA_READ, first_key,
                            local.buffer().mr_address() + kWindowOffset, 64),
                  "a READ with the key of the first binding");
  });
}

// A type 2 window, zero-based, bound by a WR under a key the binder picks;
// invalidated by the binder while the peer still uses the key.
TEST(MemoryWindow, TypeTwoInvalidatedLocallyWhileThePeerUsesIt) {
  if (!device_has_windows(2)) GTEST_SKIP() << "the device has no type 2 memory windows";
  with_connected_pair(window_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    MwPtr mw(ibv_alloc_mw(local.pd(), IBV_MW_TYPE_2));
    ASSERT_TRUE(mw) << strerror(errno);
    const uint32_t key = ibv_inc_rkey(mw->rkey);
    const ibv_wc bound = bind_type2(
        local, mw.get(), key,
        window_on(local, kWindowOffset, kWindowLength, kRemoteRights | IBV_ACCESS_ZERO_BASED));
    expect_completion(bound, 70, IBV_WC_SUCCESS, "IBV_WR_BIND_MW");
    EXPECT_EQ(bound.opcode, IBV_WC_BIND_MW);
    ASSERT_EQ(0, remote.fill(0, 4096, 47)) << remote.why();
    // Zero-based: the window's first byte is address 0.
    expect_status(IBV_WC_SUCCESS, peer_rdma(remote, IBV_WR_RDMA_WRITE, key, 2048, 4096),
                  "the peer's WRITE at window offset 2048");
    EXPECT_FALSE(local.check(kWindowOffset + 2048, 4096, 47)) << "the WRITE did not land";
    ibv_send_wr inv{};
    inv.wr_id = 71;
    inv.opcode = IBV_WR_LOCAL_INV;
    inv.send_flags = IBV_SEND_SIGNALED;
    inv.invalidate_rkey = key;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(0, ibv_post_send(local.qp(), &inv, &bad));
    std::vector<ibv_wc> wc;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, wc));
    expect_completion(wc[0], 71, IBV_WC_SUCCESS, "IBV_WR_LOCAL_INV");
    EXPECT_EQ(wc[0].opcode, IBV_WC_LOCAL_INV);
    expect_status(IBV_WC_REM_ACCESS_ERR, peer_rdma(remote, IBV_WR_RDMA_WRITE, key, 2048, 64),
                  "the peer's WRITE through the invalidated window");
  });
}

// The peer frees the window with a SEND with invalidate, long enough to
// take many packets; the receive says so, and the key reaches nothing
// afterwards.
TEST(MemoryWindow, TypeTwoInvalidatedByThePeersSend) {
  if (!device_has_windows(2)) GTEST_SKIP() << "the device has no type 2 memory windows";
  with_connected_pair(window_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    MwPtr mw(ibv_alloc_mw(local.pd(), IBV_MW_TYPE_2));
    ASSERT_TRUE(mw);
    const uint32_t key = ibv_inc_rkey(mw->rkey);
    expect_completion(
        bind_type2(local, mw.get(), key,
                   window_on(local, kWindowOffset, kWindowLength, kRemoteRights)),
        70, IBV_WC_SUCCESS, "IBV_WR_BIND_MW");
    const uint64_t start = local.buffer().mr_address() + kWindowOffset;
    expect_status(IBV_WC_SUCCESS, peer_rdma(remote, IBV_WR_RDMA_READ, key, start, 256),
                  "the peer's READ before the invalidation");
    constexpr uint32_t kSendLength = 40000;
    ASSERT_EQ(0, local.post_recv({5, 0, kSendLength}));
    ASSERT_EQ(0, remote.fill(0, kSendLength, 53)) << remote.why();
    SendSpec send;
    send.wr_id = 6;
    send.opcode = IBV_WR_SEND_WITH_INV;
    send.length = kSendLength;
    send.rkey = key;
    ASSERT_EQ(0, remote.post_send(send)) << remote.why();
    std::vector<ibv_wc> wc;
    ASSERT_EQ(0, remote.poll(Queue::kSend, 1, wc)) << remote.why();
    expect_completion(wc[0], 6, IBV_WC_SUCCESS, "the SEND with invalidate");
    EXPECT_EQ(wc[0].opcode, IBV_WC_SEND);
    wc.clear();
    ASSERT_EQ(0, local.poll(Queue::kRecv, 1, wc));
    expect_completion(wc[0], 5, IBV_WC_SUCCESS, "its receive");
    EXPECT_TRUE(wc[0].wc_flags & IBV_WC_WITH_INV);
    EXPECT_EQ(wc[0].invalidated_rkey, key);
    EXPECT_EQ(wc[0].byte_len, kSendLength);
    EXPECT_FALSE(local.check(0, kSendLength, 53)) << "the SEND's bytes did not land";
    expect_status(IBV_WC_REM_ACCESS_ERR, peer_rdma(remote, IBV_WR_RDMA_READ, key, start, 256),
                  "the peer's READ after the invalidation");
  });
}

// Deallocating a bound window takes its key away from the peer.
TEST(MemoryWindow, DeallocatingABoundWindowEndsThePeersAccess) {
  if (!device_has_windows(1)) GTEST_SKIP() << "the device has no memory windows";
  with_connected_pair(window_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    MwPtr mw(ibv_alloc_mw(local.pd(), IBV_MW_TYPE_1));
    ASSERT_TRUE(mw);
    expect_completion(bind_type1(local, mw.get(),
                                 window_on(local, kWindowOffset, kWindowLength, kRemoteRights)),
                      60, IBV_WC_SUCCESS, "ibv_bind_mw");
    const uint32_t key = mw->rkey;
    const uint64_t start = local.buffer().mr_address() + kWindowOffset;
    expect_status(IBV_WC_SUCCESS, peer_rdma(remote, IBV_WR_RDMA_READ, key, start, 64),
                  "a READ while bound");
    mw.reset();
    expect_status(IBV_WC_REM_ACCESS_ERR, peer_rdma(remote, IBV_WR_RDMA_READ, key, start, 64),
                  "a READ after ibv_dealloc_mw");
  });
}

// A window grants no local access, so IBV_ACCESS_LOCAL_WRITE (or
// IBV_ACCESS_MW_BIND) among a bind's flags grants nothing: mlx5 and rxe bind
// (programs written for them pass the MR's own flags), by each of the three
// ways to bind, and the peer reaches the window with the remote rights it
// names. A type 1 window is never zero-based (EINVAL, as on both).
TEST(MemoryWindow, LocalRightsInABindAreIgnored) {
  if (!device_has_windows(1)) GTEST_SKIP() << "the device has no memory windows";
  constexpr int kAccess = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
  enum class Way { kBindMwVerb, kPostedWr, kBuilder };
  for (Way way : {Way::kBindMwVerb, Way::kPostedWr, Way::kBuilder}) {
    const char* what = way == Way::kBindMwVerb ? "type 1 by ibv_bind_mw"
                       : way == Way::kPostedWr ? "type 2 by IBV_WR_BIND_MW"
                                               : "type 2 by ibv_wr_bind_mw";
    SCOPED_TRACE(what);
    if (way != Way::kBindMwVerb && !device_has_windows(2)) continue;
    PairOptions options = window_options();
    options.local.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND;
    with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                     const EndpointInfo&) {
      MwPtr mw(ibv_alloc_mw(local.pd(), way == Way::kBindMwVerb ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2));
      ASSERT_TRUE(mw) << strerror(errno);
      const ibv_mw_bind_info info = window_on(local, kWindowOffset, kWindowLength, kAccess);
      uint32_t key = ibv_inc_rkey(mw->rkey);
      ibv_wc wc{};
      if (way == Way::kBindMwVerb) {
        // A type 1 window is never zero-based: refused before anything is posted.
        ibv_mw_bind zero_based{};
        zero_based.bind_info = window_on(local, kWindowOffset, kWindowLength,
                                         kAccess | IBV_ACCESS_ZERO_BASED);
        EXPECT_EQ(EINVAL, ibv_bind_mw(local.qp(), mw.get(), &zero_based));
        wc = bind_type1(local, mw.get(), info);
        key = mw->rkey;
      } else if (way == Way::kPostedWr) {
        wc = bind_type2(local, mw.get(), key, info);
      } else {
        wc = bind_type2_by_builder(local, mw.get(), key, info, 70);
      }
      expect_completion(wc, way == Way::kBindMwVerb ? 60 : 70, IBV_WC_SUCCESS, what);
      const uint64_t start = local.buffer().mr_address() + kWindowOffset;
      ASSERT_EQ(0, remote.fill(0, 4096, 47)) << remote.why();
      expect_status(IBV_WC_SUCCESS, peer_rdma(remote, IBV_WR_RDMA_WRITE, key, start, 4096),
                    "the peer's WRITE through the window");
      EXPECT_FALSE(local.check(kWindowOffset, 4096, 47)) << "the WRITE did not land";
      expect_status(IBV_WC_REM_ACCESS_ERR, peer_rdma(remote, IBV_WR_RDMA_READ, key, start, 64),
                    "a READ the window does not grant");
    });
  }
}

// Each rule of a binding (IBTA 10.6.7), broken once: the bind completes
// with IBV_WC_MW_BIND_ERR and the QP goes to the error state.
TEST(MemoryWindow, BindsThatBreakARuleCompleteWithMwBindErr) {
  if (!device_has_windows(2)) GTEST_SKIP() << "the device has no type 2 memory windows";
  struct Case {
    const char* what;
    int access;
    uint64_t offset;
    uint64_t length;
    bool mr_without_bind = false;
    bool mr_read_only = false;
    bool other_index = false;
    bool bound_twice = false;
  };
  const Case cases[] = {
      {"an MR registered without IBV_ACCESS_MW_BIND", kRemoteRights, kWindowOffset, 4096, true},
      {"remote write on an MR without local write", IBV_ACCESS_REMOTE_WRITE, 0, 4096, false, true},
      {"a range outside the MR", kRemoteRights, (1 << 20) - 4096, 8192},
      {"a key of another index", kRemoteRights, kWindowOffset, 4096, false, false, true},
      {"a type 2 window bound already", kRemoteRights, kWindowOffset, 4096, false, false, false,
       true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    with_connected_pair(window_options(), [&](Endpoint& local, RemoteEndpoint&,
                                              const EndpointInfo&) {
      MwPtr mw(ibv_alloc_mw(local.pd(), IBV_MW_TYPE_2));
      ASSERT_TRUE(mw);
      MrPtr other;
      ibv_mr* mr = nullptr;
      if (c.mr_without_bind || c.mr_read_only) {
        const int access = c.mr_without_bind
                               ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ
                               : IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_READ;
        other.reset(ibv_reg_mr(local.pd(), local.buffer().data(), local.buffer().size(), access));
        ASSERT_TRUE(other) << strerror(errno);
        mr = other.get();
      }
      ibv_mw_bind_info info = window_on(local, c.offset, c.length, c.access, mr);
      if (mr) info.addr = reinterpret_cast<uintptr_t>(local.buffer().data()) + c.offset;
      uint32_t key = ibv_inc_rkey(mw->rkey);
      if (c.other_index) key ^= 0x100;
      if (c.bound_twice) {
        expect_completion(bind_type2(local, mw.get(), key, info), 70, IBV_WC_SUCCESS,
                          "the first bind");
        key = ibv_inc_rkey(key);
      }
      const ibv_wc wc = bind_type2(local, mw.get(), key, info);
      expect_completion(wc, 70, IBV_WC_MW_BIND_ERR, c.what);
      EXPECT_EQ(IBV_QPS_ERR, local.state());
    });
  }
}

// The ibv_wr_* builders bind and invalidate as posted WRs do.
// A local invalidation of a window that is not bound is a local error.
TEST(MemoryWindow, InvalidatingAFreeWindowFailsTheQp) {
  if (!device_has_windows(2)) GTEST_SKIP() << "the device has no type 2 memory windows";
  with_connected_pair(window_options(), [&](Endpoint& local, RemoteEndpoint&,
                                            const EndpointInfo&) {
    MwPtr mw(ibv_alloc_mw(local.pd(), IBV_MW_TYPE_2));
    ASSERT_TRUE(mw);
    ibv_send_wr inv{};
    inv.wr_id = 72;
    inv.opcode = IBV_WR_LOCAL_INV;
    inv.send_flags = IBV_SEND_SIGNALED;
    inv.invalidate_rkey = mw->rkey;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(0, ibv_post_send(local.qp(), &inv, &bad));
    std::vector<ibv_wc> wc;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, wc));
    expect_completion(wc[0], 72, IBV_WC_MW_BIND_ERR, "IBV_WR_LOCAL_INV of a free window");
    EXPECT_EQ(IBV_QPS_ERR, local.state());
  });
}

TEST(MemoryWindow, TheBuildersBindAndInvalidate) {
  if (!device_has_windows(2)) GTEST_SKIP() << "the device has no type 2 memory windows";
  PairOptions options = window_options();
  options.local.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
                                 IBV_QP_EX_WITH_SEND;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                   const EndpointInfo&) {
    ibv_qp_ex* qpx = local.qp_ex();
    ASSERT_NE(qpx, nullptr);
    MwPtr mw(ibv_alloc_mw(local.pd(), IBV_MW_TYPE_2));
    ASSERT_TRUE(mw);
    const uint32_t key = ibv_inc_rkey(mw->rkey);
    const ibv_mw_bind_info info = window_on(local, kWindowOffset, kWindowLength, kRemoteRights);
    expect_completion(bind_type2_by_builder(local, mw.get(), key, info, 80), 80, IBV_WC_SUCCESS,
                      "ibv_wr_bind_mw");
    std::vector<ibv_wc> wc;
    const uint64_t start = local.buffer().mr_address() + kWindowOffset;
    expect_status(IBV_WC_SUCCESS, peer_rdma(remote, IBV_WR_RDMA_READ, key, start, 64),
                  "a READ through the window");
    ibv_wr_start(qpx);
    qpx->wr_id = 81;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_local_inv(qpx, key);
    ASSERT_EQ(0, ibv_wr_complete(qpx));
    wc.clear();
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, wc));
    expect_completion(wc[0], 81, IBV_WC_SUCCESS, "ibv_wr_local_inv");
    expect_status(IBV_WC_REM_ACCESS_ERR, peer_rdma(remote, IBV_WR_RDMA_READ, key, start, 64),
                  "a READ after the invalidation");
  });
}

}  // namespace
}  // namespace softverbs::conformance
