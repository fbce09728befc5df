// The memory placement extensions (IBTA annex A19) as rdma-core exposes
// them: ATOMIC WRITE (IBV_WR_ATOMIC_WRITE, ibv_wr_atomic_write) places 8
// bytes at an aligned remote word in one store, with the rights of an RDMA
// WRITE; FLUSH (ibv_wr_flush) completes once everything before it is
// visible at the target, with the flush right of both the QP and the MR.
// Devices advertise them in device_cap_flags_ex; a device without them
// skips these tests.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

// rdma-core 47 names these; older verbs.h (Debian 12's is 44) does not.
constexpr uint64_t kDeviceFlushGlobal = 1ull << 38;  // IB_UVERBS_DEVICE_FLUSH_GLOBAL
constexpr uint64_t kDeviceAtomicWrite = 1ull << 40;  // IB_UVERBS_DEVICE_ATOMIC_WRITE
constexpr int kAccessFlushGlobal = 1 << 8;           // IBV_ACCESS_FLUSH_GLOBAL
constexpr uint64_t kQpExWithFlush = 1ull << 11;      // IBV_QP_EX_WITH_FLUSH
constexpr ibv_wc_opcode kWcFlush = static_cast<ibv_wc_opcode>(8);  // IBV_WC_FLUSH
constexpr uint8_t kFlushGlobal = 1;                  // IBV_FLUSH_GLOBAL
constexpr uint8_t kFlushRange = 0;                   // IBV_FLUSH_RANGE
constexpr uint8_t kFlushMr = 1;                      // IBV_FLUSH_MR

// ibv_wr_flush(): rdma-core 47 put wr_flush right after the members of
// Debian 12's struct ibv_qp_ex.
void wr_flush(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, size_t length, uint8_t type,
              uint8_t level) {
  using Flush = void (*)(ibv_qp_ex*, uint32_t, uint64_t, size_t, uint8_t, uint8_t);
  Flush flush;
  std::memcpy(&flush, reinterpret_cast<const char*>(qpx) + sizeof(ibv_qp_ex), sizeof flush);
  flush(qpx, rkey, remote_addr, length, type, level);
}

// One signaled FLUSH to global visibility, alone in its batch: what
// ibv_wr_complete returned.
int post_flush(Endpoint& local, uint64_t wr_id, uint32_t rkey, uint64_t remote_addr,
               size_t length, uint8_t level) {
  ibv_qp_ex* qpx = local.qp_ex();
  if (!qpx) {
    ADD_FAILURE() << "the QP has no ibv_qp_ex: it was made without send ops";
    return EINVAL;
  }
  ibv_wr_start(qpx);
  qpx->wr_id = wr_id;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  wr_flush(qpx, rkey, remote_addr, length, kFlushGlobal, level);
  return ibv_wr_complete(qpx);
}

uint64_t device_cap_flags_ex() {
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  ibv_device_attr_ex attr{};
  if (!context || ibv_query_device_ex(context.get(), nullptr, &attr) != 0) return 0;
  return attr.device_cap_flags_ex;
}

constexpr int kWriteAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

PairOptions placement_options(int access, uint64_t send_ops = 0) {
  RcParameters params;
  params.access = access;
  PairOptions options = symmetric_options(params);
  options.local.buffer_access = options.remote.buffer_access = access;
  options.local.send_ops_flags = send_ops;
  return options;
}

SendSpec atomic_write(uint64_t wr_id, uint64_t remote_offset, uint64_t local_offset) {
  SendSpec spec;
  spec.wr_id = wr_id;
  spec.opcode = IBV_WR_ATOMIC_WRITE;
  spec.local_offset = local_offset;
  spec.length = sizeof(uint64_t);
  spec.remote_offset = remote_offset;
  return spec;
}

ibv_wc one_send_completion(Endpoint& local) {
  std::vector<ibv_wc> done;
  EXPECT_EQ(0, local.poll(Queue::kSend, 1, done));
  return done.empty() ? ibv_wc{} : done[0];
}

uint64_t remote_word(RemoteEndpoint& remote, uint64_t offset) {
  uint64_t value = 0;
  EXPECT_EQ(0, remote.read_word(offset, value)) << remote.why();
  return value;
}

#define SKIP_WITHOUT(flag, what)                                   \
  if (!(device_cap_flags_ex() & (flag)))                           \
  GTEST_SKIP() << "the device does not advertise " what " in device_cap_flags_ex"

// The 8 bytes of the WR's one SGE replace the remote word; the completion
// is IBV_WC_ATOMIC_WRITE, and the neighbouring words are untouched.
TEST(AtomicWrite, PostedWithOneSgeReplacesTheAlignedWord) {
  SKIP_WITHOUT(kDeviceAtomicWrite, "ATOMIC_WRITE");
  with_connected_pair(placement_options(kWriteAccess), [&](Endpoint& local,
                                                           RemoteEndpoint& remote,
                                                           const EndpointInfo&) {
    for (uint64_t offset : {56, 64, 72}) ASSERT_EQ(0, remote.write_word(offset, 0x1111));
    local.write_word(0, 0xfeedfacecafebeefull);
    ASSERT_EQ(0, local.post_send(atomic_write(1, 64, 0)));
    const ibv_wc wc = one_send_completion(local);
    expect_completion(wc, 1, IBV_WC_SUCCESS, "ATOMIC_WRITE");
    EXPECT_EQ(IBV_WC_ATOMIC_WRITE, wc.opcode) << describe_completion(wc);
    EXPECT_EQ(0xfeedfacecafebeefull, remote_word(remote, 64));
    EXPECT_EQ(0x1111u, remote_word(remote, 56));
    EXPECT_EQ(0x1111u, remote_word(remote, 72));
  });
}

// ibv_wr_atomic_write copies the 8 bytes when it is called: the caller's
// variable may change before ibv_wr_complete.
TEST(AtomicWrite, BuilderTakesItsBytesWhenCalled) {
  SKIP_WITHOUT(kDeviceAtomicWrite, "ATOMIC_WRITE");
  with_connected_pair(placement_options(kWriteAccess, IBV_QP_EX_WITH_ATOMIC_WRITE),
                      [&](Endpoint& local, RemoteEndpoint& remote, const EndpointInfo& info) {
    ibv_qp_ex* qpx = local.qp_ex();
    ASSERT_NE(nullptr, qpx);
    uint64_t value = 0x0102030405060708ull;
    ibv_wr_start(qpx);
    qpx->wr_id = 7;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_write(qpx, info.qp.rkey, info.qp.addr + 128, &value);
    value = 0;
    ASSERT_EQ(0, ibv_wr_complete(qpx));
    const ibv_wc wc = one_send_completion(local);
    expect_completion(wc, 7, IBV_WC_SUCCESS, "ibv_wr_atomic_write");
    EXPECT_EQ(IBV_WC_ATOMIC_WRITE, wc.opcode) << describe_completion(wc);
    EXPECT_EQ(0x0102030405060708ull, remote_word(remote, 128));
  });
}

// Like the other atomics, it addresses an aligned word (IBTA 9.4.5): a
// misaligned one is an invalid request, the word is untouched.
TEST(AtomicWrite, MisalignedAddressIsRemoteInvalidRequest) {
  SKIP_WITHOUT(kDeviceAtomicWrite, "ATOMIC_WRITE");
  with_connected_pair(placement_options(kWriteAccess), [&](Endpoint& local,
                                                           RemoteEndpoint& remote,
                                                           const EndpointInfo&) {
    ASSERT_EQ(0, remote.write_word(64, 0x2222));
    local.write_word(0, ~0ull);
    ASSERT_EQ(0, local.post_send(atomic_write(1, 68, 0)));
    expect_completion(one_send_completion(local), 1, IBV_WC_REM_INV_REQ_ERR,
                      "misaligned ATOMIC_WRITE");
    EXPECT_EQ(0x2222u, remote_word(remote, 64));
  });
}

// It needs remote write rights on the target MR (the restricted region has
// local write only).
TEST(AtomicWrite, WithoutRemoteWriteRightsIsRemoteAccessError) {
  SKIP_WITHOUT(kDeviceAtomicWrite, "ATOMIC_WRITE");
  with_connected_pair(placement_options(kWriteAccess), [&](Endpoint& local, RemoteEndpoint&,
                                                           const EndpointInfo&) {
    SendSpec spec = atomic_write(1, 0, 0);
    spec.target = RemoteTarget::kRestrictedRegion;
    ASSERT_EQ(0, local.post_send(spec));
    expect_completion(one_send_completion(local), 1, IBV_WC_REM_ACCESS_ERR,
                      "ATOMIC_WRITE to an MR without remote write");
  });
}

// ibv_post_send(3) takes the data from one 8-byte SGE; any other gather list
// is refused at post time with nothing queued.
TEST(AtomicWrite, GatherListOtherThanOneWordIsRefused) {
  SKIP_WITHOUT(kDeviceAtomicWrite, "ATOMIC_WRITE");
  with_connected_pair(placement_options(kWriteAccess), [&](Endpoint& local, RemoteEndpoint&,
                                                           const EndpointInfo&) {
    SendSpec spec = atomic_write(1, 0, 0);
    spec.length = 16;
    EXPECT_EQ(EINVAL, local.post_send(spec));
    std::vector<ibv_wc> done;
    EXPECT_EQ(0, local.poll(Queue::kSend, 0, done));
    EXPECT_TRUE(done.empty()) << "a refused WR completed";
  });
}

// A lost acknowledgement makes the requester send the ATOMIC WRITE again;
// the responder answers the duplicate as it does a WRITE's, and the word
// holds the value once.
TEST(AtomicWrite, LostAcknowledgeIsRecoveredByRetransmission) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  SKIP_WITHOUT(kDeviceAtomicWrite, "ATOMIC_WRITE");
  SoftControlReset reset(test_config().device_name);
  PairOptions options = placement_options(kWriteAccess);
  options.local_params.timeout = options.remote_params.timeout = 12;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                   const EndpointInfo& info) {
    std::string reply;
    ASSERT_EQ(0, soft_control("fault set drop:dir=rx,op=ACKNOWLEDGE,nth=1", reply)) << reply;
    local.write_word(0, 0xabcdef);
    ASSERT_EQ(0, local.post_send(atomic_write(1, 8, 0)));
    expect_completion(one_send_completion(local), 1, IBV_WC_SUCCESS, "ATOMIC_WRITE");
    EXPECT_EQ(0xabcdefu, remote_word(remote, 8));
    std::string remote_stats;
    ASSERT_EQ(0, remote.control("stats", remote_stats)) << remote.why();
    EXPECT_EQ(1u, qp_counter(remote_stats, info.qp.qpn, "duplicate_requests").value_or(0))
        << remote_stats;
  });
}

constexpr int kFlushAccess = kWriteAccess | kAccessFlushGlobal;

// One WRITE, then a FLUSH of its range to global visibility: the FLUSH
// completes as IBV_WC_FLUSH after the WRITE, with the data in place.
TEST(Flush, RangeFlushCompletesAfterTheWritesBeforeIt) {
  SKIP_WITHOUT(kDeviceFlushGlobal, "FLUSH_GLOBAL");
  with_connected_pair(
      placement_options(kFlushAccess, IBV_QP_EX_WITH_RDMA_WRITE | kQpExWithFlush),
      [&](Endpoint& local, RemoteEndpoint& remote, const EndpointInfo& info) {
        ibv_qp_ex* qpx = local.qp_ex();
        ASSERT_NE(nullptr, qpx);
        constexpr uint32_t kLength = 64 * 1024;
        local.fill(0, kLength, 31);
        ibv_wr_start(qpx);
        qpx->wr_id = 1;
        qpx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_rdma_write(qpx, info.qp.rkey, info.qp.addr);
        ibv_wr_set_sge(qpx, local.buffer().lkey(), local.buffer().mr_address(), kLength);
        qpx->wr_id = 2;
        wr_flush(qpx, info.qp.rkey, info.qp.addr, kLength, kFlushGlobal, kFlushRange);
        ASSERT_EQ(0, ibv_wr_complete(qpx));
        std::vector<ibv_wc> done;
        ASSERT_EQ(0, local.poll(Queue::kSend, 2, done));
        expect_completion(done[0], 1, IBV_WC_SUCCESS, "RDMA_WRITE");
        expect_completion(done[1], 2, IBV_WC_SUCCESS, "FLUSH");
        EXPECT_EQ(kWcFlush, done[1].opcode) << describe_completion(done[1]);
        std::optional<ByteMismatch> mismatch;
        ASSERT_EQ(0, remote.check(0, kLength, 31, mismatch)) << remote.why();
        EXPECT_FALSE(mismatch.has_value()) << "the written bytes differ after the FLUSH";
      });
}

// A FLUSH of the whole MR names no range: any address and length do.
TEST(Flush, WholeMrFlushIgnoresTheRange) {
  SKIP_WITHOUT(kDeviceFlushGlobal, "FLUSH_GLOBAL");
  with_connected_pair(placement_options(kFlushAccess, kQpExWithFlush),
                      [&](Endpoint& local, RemoteEndpoint&, const EndpointInfo& info) {
    ASSERT_EQ(0, post_flush(local, 3, info.qp.rkey, 0, 0, kFlushMr));
    const ibv_wc wc = one_send_completion(local);
    expect_completion(wc, 3, IBV_WC_SUCCESS, "FLUSH of the MR");
    EXPECT_EQ(kWcFlush, wc.opcode) << describe_completion(wc);
  });
}

// The target MR must have been registered with IBV_ACCESS_FLUSH_GLOBAL.
TEST(Flush, MrWithoutFlushRightsIsRemoteAccessError) {
  SKIP_WITHOUT(kDeviceFlushGlobal, "FLUSH_GLOBAL");
  PairOptions options = placement_options(kFlushAccess, kQpExWithFlush);
  options.remote.buffer_access = kWriteAccess;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint&, const EndpointInfo& info) {
    ASSERT_EQ(0, post_flush(local, 4, info.qp.rkey, info.qp.addr, 4096, kFlushRange));
    expect_completion(one_send_completion(local), 4, IBV_WC_REM_ACCESS_ERR,
                      "FLUSH to an MR without flush rights");
  });
}

// So must the responder's QP (qp_access_flags), as for the other remote
// operations.
TEST(Flush, QpWithoutFlushRightsIsRemoteAccessError) {
  SKIP_WITHOUT(kDeviceFlushGlobal, "FLUSH_GLOBAL");
  PairOptions options = placement_options(kFlushAccess, kQpExWithFlush);
  options.remote_params.access = kWriteAccess;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint&, const EndpointInfo& info) {
    ASSERT_EQ(0, post_flush(local, 5, info.qp.rkey, info.qp.addr, 4096, kFlushRange));
    expect_completion(one_send_completion(local), 5, IBV_WC_REM_ACCESS_ERR,
                      "FLUSH through a QP without flush rights");
  });
}

// A lost answer makes the requester ask again; the responder answers the
// duplicate FLUSH again, and it completes once.
TEST(Flush, LostResponseIsRecoveredByRetransmission) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  SKIP_WITHOUT(kDeviceFlushGlobal, "FLUSH_GLOBAL");
  SoftControlReset reset(test_config().device_name);
  PairOptions options = placement_options(kFlushAccess, kQpExWithFlush);
  options.local_params.timeout = options.remote_params.timeout = 12;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                   const EndpointInfo& info) {
    std::string reply;
    ASSERT_EQ(0, soft_control("fault set drop:dir=rx,op=READ_RESPONSE_ONLY,nth=1", reply))
        << reply;
    ASSERT_EQ(0, post_flush(local, 6, info.qp.rkey, info.qp.addr, 4096, kFlushRange));
    expect_completion(one_send_completion(local), 6, IBV_WC_SUCCESS, "FLUSH");
    std::vector<ibv_wc> more;
    EXPECT_EQ(0, local.poll(Queue::kSend, 0, more));
    EXPECT_TRUE(more.empty()) << "the FLUSH completed twice";
    std::string remote_stats;
    ASSERT_EQ(0, remote.control("stats", remote_stats)) << remote.why();
    EXPECT_EQ(1u, qp_counter(remote_stats, info.qp.qpn, "duplicate_requests").value_or(0))
        << remote_stats;
  });
}

// Neither exists on UC (ibv_wr_post(3): RC and XRC_SEND only).
TEST(MemoryPlacement, UcQpRefusesAtomicWrite) {
  SKIP_WITHOUT(kDeviceAtomicWrite, "ATOMIC_WRITE");
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  ASSERT_TRUE(context) << err;
  PdPtr pd(ibv_alloc_pd(context.get()));
  ASSERT_TRUE(pd);
  CqPtr cq(ibv_create_cq(context.get(), 4, nullptr, nullptr, 0));
  ASSERT_TRUE(cq);
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_UC;
  attr.send_cq = attr.recv_cq = cq.get();
  attr.cap = {4, 4, 1, 1, 0};
  attr.pd = pd.get();
  attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  attr.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_ATOMIC_WRITE;
  errno = 0;
  QpPtr qp(ibv_create_qp_ex(context.get(), &attr));
  EXPECT_FALSE(qp) << "a UC QP took IBV_QP_EX_WITH_ATOMIC_WRITE";
  EXPECT_EQ(EOPNOTSUPP, errno);
}

}  // namespace
}  // namespace softverbs::conformance
