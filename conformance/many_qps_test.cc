// Scale: 10,000 RC QPs in one process, each connected to a peer QP of the same
// process (ibv_create_qp(3), ibv_modify_qp(3)). QP numbers are unique
// (IBTA: a QPN identifies one QP of a channel adapter), every QP reaches
// RTS, traffic on a sample of the connections arrives on the right QP, and
// every QP is destroyed cleanly.
#include <map>
#include <set>
#include <vector>

#include "conformance/device_fixture.h"
#include "harness/testsupport/completion_polling.h"
#include "harness/testsupport/data_pattern.h"
#include "harness/testsupport/registered_buffer.h"

namespace softverbs::conformance {
namespace {

constexpr int kQpCount = 10000;
constexpr int kPairCount = kQpCount / 2;
constexpr int kSampleEvery = 25;
constexpr uint32_t kMessageLength = 64;

class ManyQps : public DeviceTest {};

TEST_F(ManyQps, TenThousandRcQpsConnectCarryTrafficAndDestroy) {
  if (device_attr().max_qp < kQpCount + 8)
    GTEST_SKIP() << "device supports only " << device_attr().max_qp << " QPs";
  PdPtr pd = alloc_pd();
  ASSERT_TRUE(pd);
  CqPtr send_cq = create_cq(256);
  CqPtr recv_cq = create_cq(256);
  ASSERT_TRUE(send_cq && recv_cq);

  std::vector<QpPtr> qps;
  qps.reserve(kQpCount);
  std::set<uint32_t> qp_numbers;
  for (int i = 0; i < kQpCount; ++i) {
    qps.push_back(create_qp(pd.get(), send_cq.get(), recv_cq.get(), {2, 2, 1, 1, 0}));
    ASSERT_TRUE(qps.back()) << "QP " << i << ": " << describe_errno(last_error_);
    EXPECT_TRUE(qp_numbers.insert(qps.back()->qp_num).second)
        << "QP number 0x" << std::hex << qps.back()->qp_num << " handed out twice";
  }

  for (int pair = 0; pair < kPairCount; ++pair) {
    ASSERT_EQ(0, connect_pair(qps[2 * pair].get(), qps[2 * pair + 1].get()))
        << "pair " << pair;
  }
  for (int i = 0; i < kQpCount; ++i)
    ASSERT_EQ(IBV_QPS_RTS, query_qp_state(qps[i].get())) << "QP " << i;

  std::vector<int> sample;
  for (int pair = 0; pair < kPairCount; pair += kSampleEvery) sample.push_back(pair);
  if (sample.back() != kPairCount - 1) sample.push_back(kPairCount - 1);

  RegisteredBuffer buffer;
  ASSERT_EQ(0, buffer.allocate(pd.get(), 2 * kPairCount * kMessageLength, IBV_ACCESS_LOCAL_WRITE));
  auto source = [&](int pair) { return buffer.data() + 2 * pair * kMessageLength; };
  auto target = [&](int pair) { return source(pair) + kMessageLength; };

  for (int pair : sample) {
    fill_pattern({source(pair), kMessageLength}, pair, 0);
    fill_constant({target(pair), kMessageLength}, 0);
    ibv_sge recv_sge{reinterpret_cast<uintptr_t>(target(pair)), kMessageLength, buffer.lkey()};
    ibv_recv_wr recv{};
    recv.wr_id = pair;
    recv.sg_list = &recv_sge;
    recv.num_sge = 1;
    ibv_recv_wr* bad_recv = nullptr;
    ASSERT_EQ(0, ibv_post_recv(qps[2 * pair + 1].get(), &recv, &bad_recv)) << "pair " << pair;

    ibv_sge send_sge{reinterpret_cast<uintptr_t>(source(pair)), kMessageLength, buffer.lkey()};
    ibv_send_wr send{};
    send.wr_id = pair;
    send.sg_list = &send_sge;
    send.num_sge = 1;
    send.opcode = IBV_WR_SEND;
    send.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad_send = nullptr;
    ASSERT_EQ(0, ibv_post_send(qps[2 * pair].get(), &send, &bad_send)) << "pair " << pair;
  }

  std::vector<ibv_wc> sent, received;
  ASSERT_EQ(0, poll_completions(send_cq.get(), sample.size(), sent));
  ASSERT_EQ(0, poll_completions(recv_cq.get(), sample.size(), received));
  std::set<uint64_t> sent_ids, received_ids;
  for (const ibv_wc& wc : sent) {
    SCOPED_TRACE(describe_completion(wc));
    ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
    ASSERT_LT(wc.wr_id, static_cast<uint64_t>(kPairCount));
    EXPECT_EQ(qps[2 * wc.wr_id]->qp_num, wc.qp_num);
    EXPECT_EQ(IBV_WC_SEND, wc.opcode);
    sent_ids.insert(wc.wr_id);
  }
  for (const ibv_wc& wc : received) {
    SCOPED_TRACE(describe_completion(wc));
    ASSERT_EQ(IBV_WC_SUCCESS, wc.status);
    ASSERT_LT(wc.wr_id, static_cast<uint64_t>(kPairCount));
    const int pair = static_cast<int>(wc.wr_id);
    EXPECT_EQ(qps[2 * pair + 1]->qp_num, wc.qp_num);
    EXPECT_EQ(IBV_WC_RECV, wc.opcode);
    EXPECT_EQ(kMessageLength, wc.byte_len);
    auto mismatch = find_pattern_mismatch({target(pair), kMessageLength}, pair, 0);
    EXPECT_FALSE(mismatch) << "pair " << pair << ": " << describe_mismatch(*mismatch);
    received_ids.insert(wc.wr_id);
  }
  EXPECT_EQ(sample.size(), sent_ids.size()) << "a send completion came twice";
  EXPECT_EQ(sample.size(), received_ids.size()) << "a receive completion came twice";

  for (int i = 0; i < kQpCount; ++i) EXPECT_EQ(0, ibv_destroy_qp(qps[i].release())) << "QP " << i;
}

}  // namespace
}  // namespace softverbs::conformance
