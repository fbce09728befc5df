// Unreliable Connected QPs (IBV_QPT_UC) between two processes (IBTA 9.8.3;
// ibv_create_qp(3)): SEND, RDMA WRITE and RDMA WRITE with immediate arrive
// intact and in order; there are no ACKs and no retries, so a sender's WR
// completes once sent, and a message that loses a packet is silently
// missing at the receiver (no completion, no error), while the next message
// arrives normally and uses the receive WQE the lost one would have used
// (IBTA 9.8.3.1 "UC responder: PSN errors drop the message").
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

constexpr uint8_t kUntouched = 0x5a;

PairOptions uc_options() { return symmetric_options({}, IBV_QPT_UC); }

SendSpec send_of(uint64_t wr_id, uint32_t length, uint64_t local_offset) {
  SendSpec spec;
  spec.wr_id = wr_id;
  spec.length = length;
  spec.local_offset = local_offset;
  return spec;
}

SendSpec write_of(uint64_t wr_id, uint32_t length, uint64_t local_offset, uint64_t remote_offset,
                  bool with_imm = false, uint32_t imm = 0) {
  SendSpec spec = send_of(wr_id, length, local_offset);
  spec.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  spec.remote_offset = remote_offset;
  spec.imm_data = htonl(imm);
  return spec;
}

void expect_remote_data(RemoteEndpoint& remote, uint64_t offset, uint64_t length, uint64_t seed,
                        const std::string& what) {
  std::optional<ByteMismatch> wrong;
  ASSERT_EQ(0, remote.check(offset, length, seed, wrong)) << remote.why();
  EXPECT_FALSE(wrong) << what << ": " << describe_mismatch(*wrong);
}

// The largest path MTU both ends use (the port's active MTU, at most 4096).
uint32_t path_mtu_bytes(const Endpoint& local) {
  const ibv_mtu mtu = std::min(IBV_MTU_4096, local.port().active_mtu);
  return 128u << mtu;
}

// Messages of one packet, several packets, and over a hundred, each checked
// where it lands; completions carry byte_len, opcode and the immediate.
TEST(UcTransport, SendWriteAndWriteWithImmArriveIntactAndInOrder) {
  with_connected_pair(uc_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                        const EndpointInfo&) {
    const uint32_t sizes[] = {1, 4096, 4097, 65536};
    uint64_t offset = 0;
    for (size_t i = 0; i < 4; ++i) {
      ASSERT_EQ(0, remote.post_recv({10 + i, offset, sizes[i]})) << remote.why();
      local.fill(offset, sizes[i], 100 + i);
      ASSERT_EQ(0, local.post_send(send_of(1 + i, sizes[i], offset)));
      offset += 65536;
    }
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 4, sent));
    for (size_t i = 0; i < 4; ++i) expect_completion(sent[i], 1 + i, IBV_WC_SUCCESS, "UC SEND");
    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 4, received)) << remote.why();
    for (size_t i = 0; i < 4; ++i) {
      expect_completion(received[i], 10 + i, IBV_WC_SUCCESS, "UC receive");
      EXPECT_EQ(IBV_WC_RECV, received[i].opcode);
      EXPECT_EQ(sizes[i], received[i].byte_len);
      expect_remote_data(remote, i * 65536, sizes[i], 100 + i, "SEND " + std::to_string(i));
    }

    // WRITE then WRITE with immediate: the immediate's receive completion
    // comes after the plain WRITE landed (one QP, in order).
    constexpr uint32_t kWriteLength = 300000;
    constexpr uint32_t kImmLength = 5000;
    constexpr uint64_t kWriteAt = 300000, kImmAt = 700000;
    ASSERT_EQ(0, remote.post_recv({20, 0, 0})) << remote.why();
    local.fill(kWriteAt, kWriteLength, 200);
    local.fill(kImmAt, kImmLength, 201);
    ASSERT_EQ(0, local.post_send(write_of(5, kWriteLength, kWriteAt, kWriteAt)));
    ASSERT_EQ(0, local.post_send(write_of(6, kImmLength, kImmAt, kImmAt, true, 0x12345678)));
    sent.clear();
    ASSERT_EQ(0, local.poll(Queue::kSend, 2, sent));
    expect_completion(sent[0], 5, IBV_WC_SUCCESS, "UC RDMA WRITE");
    expect_completion(sent[1], 6, IBV_WC_SUCCESS, "UC RDMA WRITE with immediate");
    received.clear();
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 20, IBV_WC_SUCCESS, "the immediate's receive");
    EXPECT_EQ(IBV_WC_RECV_RDMA_WITH_IMM, received[0].opcode);
    EXPECT_TRUE(received[0].wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(0x12345678u, ntohl(received[0].imm_data));
    expect_remote_data(remote, kWriteAt, kWriteLength, 200, "RDMA WRITE");
    expect_remote_data(remote, kImmAt, kImmLength, 201, "RDMA WRITE with immediate");
  });
}

struct LossCase {
  const char* name;
  const char* fault;          // applied to the sender's transmissions
  uint32_t lost_packets;      // length of the lost message, in path MTUs
};

void PrintTo(const LossCase& c, std::ostream* out) { *out << c.name; }

class UcLoss : public ::testing::TestWithParam<LossCase> {};

// Three SENDs; a packet of the second is dropped on the sender's wire. All
// three complete successfully at the sender. The receiver gets the first in
// its first receive WQE and the third in its second; then a fourth lands in
// the third WQE, so the lost message is gone, not late.
TEST_P(UcLoss, LostSendIsSilentlyMissingAndTheNextOneArrives) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  const LossCase loss = GetParam();
  SoftControlReset reset(test_config().device_name);
  with_connected_pair(uc_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                        const EndpointInfo&) {
    const uint32_t mtu = path_mtu_bytes(local);
    const uint32_t lengths[4] = {64, loss.lost_packets * mtu, 100, 200};
    for (uint64_t i = 0; i < 4; ++i) {
      ASSERT_EQ(0, remote.post_recv({10 + i, i * 65536, 65536})) << remote.why();
      local.fill(i * 65536, lengths[i], 300 + i);
    }
    std::string reply;
    ASSERT_EQ(0, soft_control(std::string("fault set ") + loss.fault, reply)) << reply;
    for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(0, local.post_send(send_of(1 + i, lengths[i], i * 65536)));
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 3, sent));
    for (uint64_t i = 0; i < 3; ++i) {
      expect_completion(sent[i], 1 + i, IBV_WC_SUCCESS, "UC SEND " + std::to_string(1 + i));
    }
    ASSERT_EQ(0, soft_control("fault clear", reply)) << reply;

    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 2, received)) << remote.why();
    expect_completion(received[0], 10, IBV_WC_SUCCESS, "the first receive");
    EXPECT_EQ(lengths[0], received[0].byte_len);
    expect_remote_data(remote, 0, lengths[0], 300, "message 1 in receive 1");
    expect_completion(received[1], 11, IBV_WC_SUCCESS, "the second receive");
    EXPECT_EQ(lengths[2], received[1].byte_len) << "the second receive holds message 3";
    expect_remote_data(remote, 65536, lengths[2], 302, "message 3 in receive 2");

    ASSERT_EQ(0, local.post_send(send_of(4, lengths[3], 3 * 65536)));
    received.clear();
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 12, IBV_WC_SUCCESS, "the third receive");
    EXPECT_EQ(lengths[3], received[0].byte_len) << "the third receive holds message 4";
    expect_remote_data(remote, 2 * 65536, lengths[3], 303, "message 4 in receive 3");
    EXPECT_EQ(IBV_QPS_RTS, remote.state()) << "loss is no error on UC";
  });
}

INSTANTIATE_TEST_SUITE_P(
    LostPackets, UcLoss,
    ::testing::Values(LossCase{"OnlyPacket", "drop:dir=tx,op=UC_SEND_ONLY,nth=2", 1},
                      LossCase{"FirstPacket", "drop:dir=tx,op=UC_SEND_FIRST,nth=1", 3},
                      LossCase{"MiddlePacket", "drop:dir=tx,op=UC_SEND_MIDDLE,nth=1", 3},
                      LossCase{"LastPacket", "drop:dir=tx,op=UC_SEND_LAST,nth=1", 3}),
    [](const auto& info) { return std::string(info.param.name); });

// A lost RDMA WRITE leaves the target untouched and raises nothing; the
// WRITE with immediate after it lands and completes its receive.
TEST(UcTransport, LostRdmaWriteLeavesTheTargetUntouchedAndTheNextWriteLands) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  SoftControlReset reset(test_config().device_name);
  with_connected_pair(uc_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                        const EndpointInfo&) {
    constexpr uint32_t kLength = 1000;
    ASSERT_EQ(0, remote.fill_constant(0, 8192, kUntouched)) << remote.why();
    ASSERT_EQ(0, remote.post_recv({30, 0, 0})) << remote.why();
    local.fill(0, kLength, 400);
    local.fill(4096, kLength, 401);
    std::string reply;
    ASSERT_EQ(0, soft_control("fault set drop:dir=tx,op=UC_RDMA_WRITE_ONLY,nth=1", reply))
        << reply;
    ASSERT_EQ(0, local.post_send(write_of(1, kLength, 0, 0)));
    ASSERT_EQ(0, local.post_send(write_of(2, kLength, 4096, 4096, true, 77)));
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 2, sent));
    expect_completion(sent[0], 1, IBV_WC_SUCCESS, "the lost WRITE, at the sender");
    expect_completion(sent[1], 2, IBV_WC_SUCCESS, "the WRITE with immediate");
    ASSERT_EQ(0, soft_control("fault clear", reply)) << reply;

    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 30, IBV_WC_SUCCESS, "the immediate's receive");
    EXPECT_EQ(77u, ntohl(received[0].imm_data));
    expect_remote_data(remote, 4096, kLength, 401, "the WRITE with immediate");
    std::optional<ByteMismatch> changed;
    ASSERT_EQ(0, remote.check_constant(0, 4096, kUntouched, changed)) << remote.why();
    EXPECT_FALSE(changed) << "the lost WRITE left data: " << describe_mismatch(*changed);
  });
}

}  // namespace
}  // namespace softverbs::conformance
