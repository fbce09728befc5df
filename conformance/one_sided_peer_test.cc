// RDMA WRITEs and READs to a peer process that never calls into verbs while
// they run (it only answers this test's requests): on an HCA they complete
// without the peer's CPU, and the peer's responder is where they left it,
// so a SEND that follows arrives in sequence. softverbs executes them from
// the initiator between processes of one host (no packet); its counters
// say so, and with a fault plan in force they travel as packets instead.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <arpa/inet.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

constexpr uint32_t kLength = 64 * 1024;

SendSpec one_sided(ibv_wr_opcode opcode, uint64_t wr_id, uint64_t local_offset,
                   uint64_t remote_offset) {
  SendSpec spec;
  spec.wr_id = wr_id;
  spec.opcode = opcode;
  spec.local_offset = local_offset;
  spec.remote_offset = remote_offset;
  spec.length = kLength;
  return spec;
}

std::optional<uint64_t> local_qp_counter(uint32_t qpn, const char* name) {
  std::string stats;
  if (soft_control("stats", stats) != 0) return std::nullopt;
  return qp_counter(stats, qpn, name);
}

TEST(OneSidedPeer, WritesAndReadsCompleteWhileThePeerIdlesAndItsNextSendIsInSequence) {
  with_connected_pair(symmetric_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                               const EndpointInfo& info) {
    local.fill(0, kLength, 41);
    ASSERT_EQ(0, remote.fill(4 * kLength, kLength, 43)) << remote.why();
    // Eight rounds of a WRITE there and a READ back from elsewhere.
    std::vector<ibv_wc> done;
    for (uint64_t round = 0; round < 8; ++round) {
      ASSERT_EQ(0, local.post_send(one_sided(IBV_WR_RDMA_WRITE, 2 * round, 0, kLength)));
      ASSERT_EQ(0, local.post_send(
                       one_sided(IBV_WR_RDMA_READ, 2 * round + 1, 2 * kLength, 4 * kLength)));
      ASSERT_EQ(0, local.poll(Queue::kSend, 2, done));
      expect_completion(done[2 * round], 2 * round, IBV_WC_SUCCESS, "the WRITE");
      expect_completion(done[2 * round + 1], 2 * round + 1, IBV_WC_SUCCESS, "the READ");
    }
    std::optional<ByteMismatch> mismatch;
    ASSERT_EQ(0, remote.check(kLength, kLength, 41, mismatch)) << remote.why();
    EXPECT_FALSE(mismatch) << "the WRITE's bytes at the peer";
    EXPECT_FALSE(local.check(2 * kLength, kLength, 43)) << "the READ's bytes here";

    // A SEND after them: the peer's responder expects its PSN.
    ASSERT_EQ(0, remote.post_recv(RecvSpec{7, 6 * kLength, 64})) << remote.why();
    SendSpec send;
    send.wr_id = 100;
    send.length = 64;
    ASSERT_EQ(0, local.post_send(send));
    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 7, IBV_WC_SUCCESS, "the SEND at the peer");
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, done));
    expect_completion(done.back(), 100, IBV_WC_SUCCESS, "the SEND");

    // Executed directly only between processes of one host.
    if (!soft_control_available() || peer_is_remote()) return;
    const uint32_t qpn = local.qp()->qp_num;
    const uint64_t direct = direct_execution_on() ? 16 : 0;
    EXPECT_EQ(direct, local_qp_counter(qpn, "direct_operations").value_or(1000));
    std::string remote_stats;
    ASSERT_EQ(0, remote.control("stats", remote_stats)) << remote.why();
    EXPECT_EQ(direct, qp_counter(remote_stats, info.qp.qpn, "executed_by_initiators").value_or(1000))
        << remote_stats;
    EXPECT_EQ(0u, qp_counter(remote_stats, info.qp.qpn, "sequence_naks_sent").value_or(1))
        << remote_stats;
  });
}

// Under a fault plan every packet must exist for the rules to act on: the
// same WRITE travels, and is counted, as packets.
TEST(OneSidedPeer, UnderAFaultPlanAWriteTravelsAsPackets) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  SoftControlReset reset(test_config().device_name);
  with_connected_pair(symmetric_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                               const EndpointInfo&) {
    // A rule that never fires still needs every packet.
    ASSERT_EQ(0, soft_control("fault set drop:op=SEND_ONLY,nth=1000000"));
    local.fill(0, kLength, 5);
    ASSERT_EQ(0, local.post_send(one_sided(IBV_WR_RDMA_WRITE, 1, 0, 0)));
    std::vector<ibv_wc> done;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, done));
    expect_completion(done[0], 1, IBV_WC_SUCCESS, "the WRITE");
    std::optional<ByteMismatch> mismatch;
    ASSERT_EQ(0, remote.check(0, kLength, 5, mismatch)) << remote.why();
    EXPECT_FALSE(mismatch);
    const uint32_t qpn = local.qp()->qp_num;
    EXPECT_EQ(0u, local_qp_counter(qpn, "direct_operations").value_or(1));
    EXPECT_GE(local_qp_counter(qpn, "packets_sent").value_or(0), 1u);
  });
}

// The inode of the shared file mapped at `addr` in a process's maps
// (/proc/PID/maps), or of any such file when `addr` is 0.
std::optional<uint64_t> shared_mr_file(const std::string& maps_path, uint64_t addr,
                                       uint64_t inode = 0) {
  std::ifstream maps(maps_path);
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:softverbs-mr") == std::string::npos) continue;
    uint64_t begin = 0, end = 0, found = 0;
    char perms[8] = {};
    unsigned long long offset = 0;
    char device[16] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %llx %15s %lu", &begin, &end, perms, &offset,
                    device, &found) != 6)
      continue;
    if (addr != 0 && (addr < begin || addr >= end)) continue;
    if (inode != 0 && found != inode) continue;
    return found;
  }
  return std::nullopt;
}

// Unless SOFTVERBS_SHARE_MR_PAGES=0 (ctest conformance_private_mr_pages)
// the peer's MR pages are a shared file, and this process maps that very
// file to write into them.
TEST(OneSidedPeer, WithSharedMrPagesTheInitiatorMapsThePeersPages) {
  if (!mr_pages_shared()) GTEST_SKIP() << "SOFTVERBS_SHARE_MR_PAGES=0: MR pages are not shared";
  if (!direct_execution_on())
    GTEST_SKIP() << "SOFTVERBS_DIRECT=0: nothing is executed on the peer's pages from here";
  if (!soft_control_available() || peer_is_remote()) GTEST_SKIP() << "needs a local soft peer";
  with_connected_pair(symmetric_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                               const EndpointInfo& info) {
    local.fill(0, kLength, 17);
    ASSERT_EQ(0, local.post_send(one_sided(IBV_WR_RDMA_WRITE, 1, 0, kLength)));
    std::vector<ibv_wc> done;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, done));
    expect_completion(done[0], 1, IBV_WC_SUCCESS, "the WRITE");
    std::optional<ByteMismatch> mismatch;
    ASSERT_EQ(0, remote.check(kLength, kLength, 17, mismatch)) << remote.why();
    EXPECT_FALSE(mismatch) << "the WRITE's bytes at the peer";
    const std::optional<uint64_t> peer_file =
        shared_mr_file("/proc/" + std::to_string(info.pid) + "/maps", info.qp.addr);
    ASSERT_TRUE(peer_file) << "the peer's MR pages are not a shared file";
    EXPECT_TRUE(shared_mr_file("/proc/self/maps", 0, *peer_file))
        << "this process does not map the peer's file " << *peer_file;
  });
}

// A peer's MR of 16 MiB or more keeps its pages at registration (a copy of
// them would cost the registration up to seconds): the first WRITEs reach
// it by system calls and ask for them, and once they moved they are a
// shared file this process maps, every byte written before and after in
// place (docs/architecture.md, "Large MRs move when a peer reaches them").
TEST(OneSidedPeer, APeersLargeMrSharesItsPagesOnceAWriteReachedIt) {
  if (!mr_pages_shared()) GTEST_SKIP() << "SOFTVERBS_SHARE_MR_PAGES=0: MR pages are not shared";
  if (!direct_execution_on())
    GTEST_SKIP() << "SOFTVERBS_DIRECT=0: nothing is executed on the peer's pages from here";
  if (!soft_control_available() || peer_is_remote()) GTEST_SKIP() << "needs a local soft peer";
  constexpr uint64_t kLarge = uint64_t{16} << 20;
  PairOptions options = symmetric_options();
  options.remote.buffer_length = kLarge;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                   const EndpointInfo& info) {
    const std::string peer_maps = "/proc/" + std::to_string(info.pid) + "/maps";
    ASSERT_FALSE(shared_mr_file(peer_maps, info.qp.addr)) << "moved at registration";
    local.fill(0, kLength, 23);
    std::vector<ibv_wc> done;
    // A WRITE a round into the next 64 KiB, until the pages moved.
    uint64_t rounds = 0;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!shared_mr_file(peer_maps, info.qp.addr) && std::chrono::steady_clock::now() < give_up &&
           (rounds + 2) * kLength <= kLarge) {
      ASSERT_EQ(0, local.post_send(one_sided(IBV_WR_RDMA_WRITE, rounds, 0, rounds * kLength)));
      ASSERT_EQ(0, local.poll(Queue::kSend, 1, done));
      expect_completion(done.back(), rounds, IBV_WC_SUCCESS, "a WRITE");
      ++rounds;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const std::optional<uint64_t> peer_file = shared_mr_file(peer_maps, info.qp.addr);
    ASSERT_TRUE(peer_file) << "the pages never moved after " << rounds << " WRITEs";
    // The peer maps its file before it publishes the MR again, so a WRITE
    // in between still travels as packets (its engine places them); the
    // first one after the publication maps the file here.
    uint64_t writes_after_move = 0;
    for (;;) {
      ASSERT_EQ(0, local.post_send(one_sided(IBV_WR_RDMA_WRITE, rounds, 0, kLarge - kLength)));
      ASSERT_EQ(0, local.poll(Queue::kSend, 1, done));
      expect_completion(done.back(), rounds, IBV_WC_SUCCESS, "a WRITE after the move");
      ++writes_after_move;
      if (shared_mr_file("/proc/self/maps", 0, *peer_file)) break;
      if (std::chrono::steady_clock::now() >= give_up) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(shared_mr_file("/proc/self/maps", 0, *peer_file))
        << "this process does not map the peer's file " << *peer_file << " after "
        << writes_after_move << " WRITEs that followed the move";
    std::optional<ByteMismatch> mismatch;
    for (uint64_t r = 0; r < rounds; ++r) {
      ASSERT_EQ(0, remote.check(r * kLength, kLength, 23, mismatch)) << remote.why();
      EXPECT_FALSE(mismatch) << "WRITE " << r << " at the peer";
    }
    ASSERT_EQ(0, remote.check(kLarge - kLength, kLength, 23, mismatch)) << remote.why();
    EXPECT_FALSE(mismatch) << "the WRITE after the move";
  });
}

// RDMA WRITE with immediate (ibv_post_send(3)): the bytes land in the
// peer's MR, a receive WQE of the peer is consumed and completes with
// IBV_WC_RECV_RDMA_WITH_IMM, the immediate and the message's length; with
// no receive WQE posted the responder answers RNR and the WRITE completes
// once one is, its bytes landing once. Between processes of one host whose
// MR pages are shared softverbs places the bytes from the initiator and
// sends one frame without payload for the rest (`payloads_placed`).
TEST(OneSidedPeer, WriteWithImmediateLandsConsumesAReceiveAndWaitsForOneWhenNoneIsPosted) {
  RcParameters params;
  params.rnr_retry = 7;
  params.min_rnr_timer = 14;  // 1.28 ms
  with_connected_pair(symmetric_options(params), [&](Endpoint& local, RemoteEndpoint& remote,
                                                     const EndpointInfo&) {
    const std::optional<uint64_t> placed_before =
        soft_control_available() ? local_qp_counter(local.qp()->qp_num, "payloads_placed")
                                 : std::nullopt;
    local.fill(0, kLength, 61);
    ASSERT_EQ(0, remote.post_recv(RecvSpec{5, 0, 16})) << remote.why();
    SendSpec write = one_sided(IBV_WR_RDMA_WRITE_WITH_IMM, 1, 0, kLength);
    write.imm_data = htonl(0x1234abcd);
    ASSERT_EQ(0, local.post_send(write));
    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 5, IBV_WC_SUCCESS, "the receive of the WRITE with immediate");
    EXPECT_EQ(IBV_WC_RECV_RDMA_WITH_IMM, received[0].opcode);
    EXPECT_EQ(kLength, received[0].byte_len);
    EXPECT_TRUE(received[0].wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(htonl(0x1234abcd), received[0].imm_data);
    std::vector<ibv_wc> done;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, done));
    expect_completion(done[0], 1, IBV_WC_SUCCESS, "the WRITE with immediate");
    std::optional<ByteMismatch> mismatch;
    ASSERT_EQ(0, remote.check(kLength, kLength, 61, mismatch)) << remote.why();
    EXPECT_FALSE(mismatch) << "the bytes at the peer";

    // None posted: RNR, and the WRITE completes once a receive is.
    local.fill(kLength, 64, 62);
    SendSpec small = one_sided(IBV_WR_RDMA_WRITE_WITH_IMM, 2, kLength, 3 * kLength);
    small.length = 64;
    small.imm_data = htonl(7);
    ASSERT_EQ(0, local.post_send(small));
    EXPECT_EQ(ETIMEDOUT, local.poll(Queue::kSend, 1, done, std::chrono::milliseconds(100)))
        << "completed with no receive posted";
    ASSERT_EQ(0, remote.post_recv(RecvSpec{6, 0, 16})) << remote.why();
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, done));
    expect_completion(done.back(), 2, IBV_WC_SUCCESS, "the WRITE with immediate after RNR");
    received.clear();
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 6, IBV_WC_SUCCESS, "the late receive");
    EXPECT_EQ(htonl(7), received[0].imm_data);
    EXPECT_EQ(64u, received[0].byte_len);
    ASSERT_EQ(0, remote.check(3 * kLength, 64, 62, mismatch)) << remote.why();
    EXPECT_FALSE(mismatch) << "the bytes at the peer after RNR";
    received.clear();
    EXPECT_EQ(ETIMEDOUT, remote.poll(Queue::kRecv, 1, received, std::chrono::milliseconds(20)))
        << "a second receive completion";

    if (!placed_before || peer_is_remote()) return;
    EXPECT_EQ(*placed_before + (direct_execution_on() && mr_pages_shared() ? 2 : 0),
              local_qp_counter(local.qp()->qp_num, "payloads_placed").value_or(0));
    EXPECT_LE(1u, local_qp_counter(local.qp()->qp_num, "rnr_naks_received").value_or(0))
        << "the second WRITE was never refused, so this did not test RNR";
  });
}

}  // namespace
}  // namespace softverbs::conformance
