// Memory regions as a peer in another process reaches them (two processes):
// an MR addressed through an iova (ibv_reg_mr(3): offset = addr + (iova -
// hca_va)), on-demand MRs, explicit and implicit (IBV_ACCESS_ON_DEMAND), and
// an MR whose memory its owner unmapped after registering it: the peer's
// RDMA ends with IBV_WC_REM_ACCESS_ERR and the owner lives on.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/device.h"
#include "harness/testsupport/soft_control.h"

namespace softverbs::conformance {
namespace {

constexpr uint32_t kLength = 4096;
constexpr uint64_t kIova = 0x5a5a000000;  // page-aligned, as the buffer

bool device_has_odp(bool implicit) {
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  if (!context) return false;
  ibv_device_attr_ex attr{};
  if (ibv_query_device_ex(context.get(), nullptr, &attr)) return false;
  const uint32_t needed = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                          IBV_ODP_SUPPORT_READ;
  return (attr.odp_caps.general_caps & IBV_ODP_SUPPORT) &&
         (attr.odp_caps.per_transport_caps.rc_odp_caps & needed) == needed &&
         (!implicit || (attr.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT));
}

// Posts `opcode` of `kLength` bytes between local offset `local_offset` and
// the peer's `remote_offset`, and expects it to complete with `status`.
void one_sided(Endpoint& local, ibv_wr_opcode opcode, uint64_t wr_id, uint64_t local_offset,
               uint64_t remote_offset, ibv_wc_status status, const std::string& what) {
  SendSpec spec;
  spec.wr_id = wr_id;
  spec.opcode = opcode;
  spec.length = kLength;
  spec.local_offset = local_offset;
  spec.remote_offset = remote_offset;
  ASSERT_EQ(0, local.post_send(spec));
  std::vector<ibv_wc> wc;
  ASSERT_EQ(0, local.poll(Queue::kSend, 1, wc));
  expect_completion(wc[0], wr_id, status, what);
}

// One WRITE of `kLength` bytes from local offset 0 to the peer's offset
// `remote_offset`, then a READ of them back to local offset 2 * kLength.
void write_then_read_back(Endpoint& local, RemoteEndpoint& remote, uint64_t remote_offset) {
  local.fill(0, kLength, 77);
  ASSERT_NO_FATAL_FAILURE(
      one_sided(local, IBV_WR_RDMA_WRITE, 1, 0, remote_offset, IBV_WC_SUCCESS, "the WRITE"));
  std::optional<ByteMismatch> mismatch;
  ASSERT_EQ(0, remote.check(remote_offset, kLength, 77, mismatch)) << remote.why();
  EXPECT_FALSE(mismatch) << describe_mismatch(*mismatch);
  ASSERT_NO_FATAL_FAILURE(one_sided(local, IBV_WR_RDMA_READ, 2, 2 * kLength, remote_offset,
                                    IBV_WC_SUCCESS, "the READ"));
  EXPECT_FALSE(local.check(2 * kLength, kLength, 77)) << "the READ brought other bytes back";
}

// ibv_reg_mr_iova(3): the peer names the MR's bytes by the iova, and the
// local SGEs of an iova MR are iova addresses too (both sides use one here).
TEST(MemoryThroughPeer, IovaAddressesLocalAndRemoteAccesses) {
  PairOptions options = symmetric_options();
  options.local.buffer_iova = kIova;
  options.remote.buffer_iova = kIova + 0x100000;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                   const EndpointInfo& info) {
    EXPECT_EQ(info.qp.addr, kIova + 0x100000);
    write_then_read_back(local, remote, 3 * kLength);
    // A SEND gathers from and scatters into iova SGEs.
    ASSERT_EQ(0, remote.post_recv({9, kLength, kLength})) << remote.why();
    SendSpec send;
    send.wr_id = 3;
    send.length = kLength;
    ASSERT_EQ(0, local.post_send(send));
    std::vector<ibv_wc> wc;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, wc)) << remote.why();
    expect_completion(wc[0], 9, IBV_WC_SUCCESS, "the SEND's receive");
    std::optional<ByteMismatch> mismatch;
    ASSERT_EQ(0, remote.check(kLength, kLength, 77, mismatch)) << remote.why();
    EXPECT_FALSE(mismatch) << describe_mismatch(*mismatch);
  });
}

TEST(MemoryThroughPeer, OnDemandMrTakesWritesReadsAndSends) {
  if (!device_has_odp(false)) GTEST_SKIP() << "the device has no RC ODP";
  PairOptions options = symmetric_options();
  options.local.buffer_access |= IBV_ACCESS_ON_DEMAND;
  options.remote.buffer_access |= IBV_ACCESS_ON_DEMAND;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote, const EndpointInfo&) {
    write_then_read_back(local, remote, 5 * kLength);
  });
}

// The peer registers memory it has not touched yet (fresh pages of its
// buffer); the WRITE faults them in on use.
TEST(MemoryThroughPeer, OnDemandMemoryNeedNotBePresentAtRegistration) {
  if (!device_has_odp(false)) GTEST_SKIP() << "the device has no RC ODP";
  PairOptions options = symmetric_options();
  options.remote.buffer_access |= IBV_ACCESS_ON_DEMAND;
  options.remote.buffer_length = 64 << 20;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote, const EndpointInfo&) {
    write_then_read_back(local, remote, (48 << 20) + kLength);
  });
}

// The owner unmaps its memory under a registered MR. An HCA (rxe too)
// pinned the pages at registration: the peer's WRITE lands in them and its
// READ gives the WRITE back. softverbs with SOFTVERBS_SHARE_MR_PAGES=0
// reaches the owner's current mapping instead, and answers with
// IBV_WC_REM_ACCESS_ERR (as for an ODP MR whose pages cannot be faulted
// in). Either way the owner takes no signal and still answers.
TEST(MemoryThroughPeer, RdmaToMemoryUnmappedAfterRegistrationReachesThePinnedPages) {
  const char* sharing = std::getenv("SOFTVERBS_SHARE_MR_PAGES");
  const bool pinned = !(soft_control_available() && sharing && std::string_view(sharing) == "0");
  const ibv_wc_status expected = pinned ? IBV_WC_SUCCESS : IBV_WC_REM_ACCESS_ERR;
  with_connected_pair(symmetric_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                               const EndpointInfo&) {
    ASSERT_EQ(0, remote.unmap_buffer()) << remote.why();
    local.fill(0, kLength, 31);
    ASSERT_NO_FATAL_FAILURE(one_sided(local, IBV_WR_RDMA_WRITE, 4, 0, kLength, expected,
                                      "WRITE to memory unmapped after registration"));
    if (pinned) {
      ASSERT_NO_FATAL_FAILURE(one_sided(local, IBV_WR_RDMA_READ, 5, 2 * kLength, kLength,
                                        IBV_WC_SUCCESS,
                                        "READ of memory unmapped after registration"));
      auto back = local.check(2 * kLength, kLength, 31);
      EXPECT_FALSE(back) << "the pinned pages did not keep the WRITE: " << describe_mismatch(*back);
    }
    // The owner took no signal: it answers (and with_connected_pair
    // checks that it ended well).
    EXPECT_NE(IBV_QPS_UNKNOWN, remote.state()) << remote.why();
  });
}

uint64_t device_max_dm_size() {
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  ibv_device_attr_ex attr{};
  if (!context || ibv_query_device_ex(context.get(), nullptr, &attr)) return 0;
  return attr.max_dm_size;
}

// ibv_reg_dm_mr(3): device memory registered zero-based takes a peer's
// WRITE at its offset, and gives it back to the peer's READ.
TEST(MemoryThroughPeer, DeviceMemoryIsTheTargetOfAPeersRdma) {
  if (device_max_dm_size() < 2 * kLength) GTEST_SKIP() << "not enough device memory";
  const PairOptions options = symmetric_options();
  const PeerOutcome peer = run_with_endpoint_peer(
      [&](PeerChannel& channel) {
        RemoteEndpoint remote(channel);
        Endpoint local;
        ASSERT_EQ(0, local.open(options.local));
        ibv_alloc_dm_attr attr{2 * kLength, 0, 0};
        ibv_dm* dm = ibv_alloc_dm(local.context(), &attr);
        ASSERT_TRUE(dm) << describe_errno(errno);
        MrPtr mr(ibv_reg_dm_mr(local.pd(), dm, 0, 2 * kLength,
                               IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE |
                                   IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
        ASSERT_TRUE(mr) << describe_errno(errno);
        EndpointInfo remote_info;
        ASSERT_EQ(0, remote.open(options.remote, remote_info)) << remote.why();
        EndpointInfo target = local.info();  // the peer's RDMA goes to the DM MR
        target.qp.rkey = mr->rkey;
        target.qp.addr = 0;
        target.qp.length = 2 * kLength;
        ASSERT_EQ(0, remote.connect(target, options.remote_params)) << remote.why();
        ASSERT_EQ(0, local.connect(remote_info, options.local_params));
        ASSERT_EQ(0, remote.fill(0, kLength, 31)) << remote.why();
        SendSpec write;
        write.wr_id = 8;
        write.opcode = IBV_WR_RDMA_WRITE;
        write.length = kLength;
        write.remote_offset = kLength;
        ASSERT_EQ(0, remote.post_send(write)) << remote.why();
        std::vector<ibv_wc> wc;
        ASSERT_EQ(0, remote.poll(Queue::kSend, 1, wc)) << remote.why();
        expect_completion(wc[0], 8, IBV_WC_SUCCESS, "the peer's WRITE to device memory");
        local.fill(0, kLength, 31);  // the same pattern, to compare with
        std::vector<uint8_t> placed(kLength);
        ASSERT_EQ(0, ibv_memcpy_from_dm(placed.data(), dm, kLength, kLength));
        EXPECT_EQ(0, std::memcmp(placed.data(), local.buffer().data(), kLength));
        SendSpec read = write;
        read.wr_id = 9;
        read.opcode = IBV_WR_RDMA_READ;
        read.local_offset = 2 * kLength;
        ASSERT_EQ(0, remote.post_send(read)) << remote.why();
        wc.clear();
        ASSERT_EQ(0, remote.poll(Queue::kSend, 1, wc)) << remote.why();
        expect_completion(wc[0], 9, IBV_WC_SUCCESS, "the peer's READ of device memory");
        std::optional<ByteMismatch> mismatch;
        ASSERT_EQ(0, remote.check(2 * kLength, kLength, 31, mismatch)) << remote.why();
        EXPECT_FALSE(mismatch) << describe_mismatch(*mismatch);
        mr.reset();
        EXPECT_EQ(0, ibv_free_dm(dm));
      },
      options.deadline);
  EXPECT_TRUE(peer.passed) << "peer process: " << peer.message;
}

}  // namespace
}  // namespace softverbs::conformance
