#include "provider/send_wr_batch.h"

#include <endian.h>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <vector>

#include "provider/send_wr_translation.h"

namespace softverbs::provider {
namespace {

// What ibv_post_send would hand the HCA for `wr`.
struct Translated {
  std::array<Sge, kMaxSge> sges;
  std::array<uint8_t, kMaxInlineData> inline_bytes;
  SendRequest request;
};

Errno translate_twin(const ibv_send_wr& wr, Translated& out) {
  return translate_send_wr(wr, {out.sges.data(), out.inline_bytes.data()}, out.request);
}

void expect_same(const SendRequest& built, const SendRequest& posted) {
  EXPECT_EQ(built.wr_id, posted.wr_id);
  EXPECT_EQ(built.opcode, posted.opcode);
  EXPECT_EQ(built.flags, posted.flags);
  EXPECT_EQ(built.imm_data, posted.imm_data);
  EXPECT_EQ(built.remote_addr, posted.remote_addr);
  EXPECT_EQ(built.rkey, posted.rkey);
  EXPECT_EQ(built.compare_add, posted.compare_add);
  EXPECT_EQ(built.swap, posted.swap);
  EXPECT_EQ(built.remote_qpn, posted.remote_qpn);
  EXPECT_EQ(built.remote_qkey, posted.remote_qkey);
  ASSERT_EQ(built.sges.size(), posted.sges.size());
  // An inline WR's bytes are what count; its SGEs named where they were.
  const bool is_inline = posted.flags & kWrInline;
  for (size_t i = 0; i < built.sges.size() && !is_inline; ++i) {
    EXPECT_EQ(built.sges[i].addr, posted.sges[i].addr);
    EXPECT_EQ(built.sges[i].length, posted.sges[i].length);
    EXPECT_EQ(built.sges[i].lkey, posted.sges[i].lkey);
  }
  ASSERT_EQ(built.inline_data.size(), posted.inline_data.size());
  if (!built.inline_data.empty()) {
    EXPECT_EQ(0, std::memcmp(built.inline_data.data(), posted.inline_data.data(),
                             built.inline_data.size()));
  }
}

class SendWrBatchTest : public ::testing::Test {
 protected:
  void SetUp() override { batch_.start(); }
  void TearDown() override { batch_.end(); }

  // The one request the batch holds, checked against its ibv_post_send twin.
  void expect_twin(const ibv_send_wr& twin) {
    std::span<const SendRequest> requests;
    ASSERT_EQ(batch_.translate(requests), 0);
    ASSERT_EQ(requests.size(), 1u);
    Translated posted;
    ASSERT_EQ(translate_twin(twin, posted), 0);
    expect_same(requests[0], posted.request);
  }

  SendWrBatch batch_;
  ibv_sge sges_[2] = {{0x1000, 100, 7}, {0x2000, 28, 8}};
};

TEST_F(SendWrBatchTest, SendWithSgeListMatchesItsTwin) {
  batch_.add(IBV_WR_SEND, 11, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED);
  batch_.set_sge_list(sges_, 2);
  ibv_send_wr twin{};
  twin.wr_id = 11;
  twin.opcode = IBV_WR_SEND;
  twin.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
  twin.sg_list = sges_;
  twin.num_sge = 2;
  expect_twin(twin);
}

TEST_F(SendWrBatchTest, RdmaWriteWithImmMatchesItsTwin) {
  ibv_send_wr& wr = batch_.add(IBV_WR_RDMA_WRITE_WITH_IMM, 12, IBV_SEND_SIGNALED);
  wr.wr.rdma = {0xabc000, 0x55};
  wr.imm_data = htobe32(0xdeadbeef);
  batch_.set_sge_list(sges_, 1);
  ibv_send_wr twin{};
  twin.wr_id = 12;
  twin.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  twin.send_flags = IBV_SEND_SIGNALED;
  twin.wr.rdma = {0xabc000, 0x55};
  twin.imm_data = htobe32(0xdeadbeef);
  twin.sg_list = sges_;
  twin.num_sge = 1;
  expect_twin(twin);
}

TEST_F(SendWrBatchTest, AtomicMatchesItsTwin) {
  ibv_send_wr& wr = batch_.add(IBV_WR_ATOMIC_CMP_AND_SWP, 13, 0);
  wr.wr.atomic = {0x8000, 5, 6, 0x77};
  ibv_sge result{0x3000, 8, 9};
  batch_.set_sge_list(&result, 1);
  ibv_send_wr twin{};
  twin.wr_id = 13;
  twin.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  twin.wr.atomic = {0x8000, 5, 6, 0x77};
  twin.sg_list = &result;
  twin.num_sge = 1;
  expect_twin(twin);
}

TEST_F(SendWrBatchTest, UdAddressGoesWhereIbvPostSendCarriesIt) {
  batch_.add(IBV_WR_SEND_WITH_IMM, 14, IBV_SEND_SIGNALED).imm_data = htobe32(3);
  auto* ah = reinterpret_cast<ibv_ah*>(0x4000);
  batch_.set_ud_addr(ah, 0x123, 0x11111111);
  batch_.set_sge_list(sges_, 1);
  ibv_send_wr twin{};
  twin.wr_id = 14;
  twin.opcode = IBV_WR_SEND_WITH_IMM;
  twin.send_flags = IBV_SEND_SIGNALED;
  twin.imm_data = htobe32(3);
  twin.wr.ud = {ah, 0x123, 0x11111111};
  twin.sg_list = sges_;
  twin.num_sge = 1;
  expect_twin(twin);
}

// The inline setters copy at once (ibv_wr_post(3)): the caller's buffers may
// change before ibv_wr_complete without changing what is sent.
TEST_F(SendWrBatchTest, InlineDataIsCopiedWhenSet) {
  std::vector<uint8_t> first(5, 0xa1), second(7, 0xb2);
  const ibv_data_buf buffers[] = {{first.data(), first.size()}, {second.data(), second.size()}};
  batch_.add(IBV_WR_SEND, 15, IBV_SEND_SIGNALED);
  batch_.set_inline_data(buffers, 2);
  std::vector<uint8_t> expected = first;
  expected.insert(expected.end(), second.begin(), second.end());
  std::fill(first.begin(), first.end(), 0);
  std::fill(second.begin(), second.end(), 0);

  ibv_sge twin_sge{reinterpret_cast<uintptr_t>(expected.data()),
                   static_cast<uint32_t>(expected.size()), 0};
  ibv_send_wr twin{};
  twin.wr_id = 15;
  twin.opcode = IBV_WR_SEND;
  twin.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  twin.sg_list = &twin_sge;
  twin.num_sge = 1;
  expect_twin(twin);
}

TEST_F(SendWrBatchTest, ManyWrsKeepTheirOwnSgesAndInlineBytes) {
  std::vector<ibv_send_wr> twins;
  std::vector<std::vector<uint8_t>> payloads;
  for (uint32_t i = 0; i < 40; ++i) {
    ibv_send_wr& wr = batch_.add(IBV_WR_RDMA_WRITE, 100 + i, 0);
    wr.wr.rdma = {0x10000 + i, i};
    if (i % 2) {
      payloads.emplace_back(i + 1, static_cast<uint8_t>(i));
      const ibv_data_buf buffer{payloads.back().data(), payloads.back().size()};
      batch_.set_inline_data(&buffer, 1);
    } else {
      batch_.set_sge_list(sges_, 2);
    }
  }
  std::span<const SendRequest> requests;
  ASSERT_EQ(batch_.translate(requests), 0);
  ASSERT_EQ(requests.size(), 40u);
  size_t payload = 0;
  for (uint32_t i = 0; i < 40; ++i) {
    EXPECT_EQ(requests[i].wr_id, 100 + i);
    if (i % 2) {
      ASSERT_EQ(requests[i].inline_data.size(), i + 1);
      EXPECT_EQ(0, std::memcmp(requests[i].inline_data.data(), payloads[payload++].data(), i + 1));
    } else {
      ASSERT_EQ(requests[i].sges.size(), 2u);
      EXPECT_EQ(requests[i].sges[1].addr, sges_[1].addr);
    }
  }
}

TEST_F(SendWrBatchTest, TheFirstErrorWins) {
  batch_.set_sge_list(sges_, 1);  // before any builder
  batch_.add(IBV_WR_SEND, 1, 0);
  batch_.fail(EOPNOTSUPP);
  std::span<const SendRequest> requests;
  EXPECT_EQ(batch_.translate(requests), EINVAL);
}

TEST_F(SendWrBatchTest, TooMuchInlineDataOrTooManySgesAreInvalid) {
  std::vector<uint8_t> big(kMaxInlineData + 1);
  const ibv_data_buf buffer{big.data(), big.size()};
  batch_.add(IBV_WR_SEND, 1, 0);
  batch_.set_inline_data(&buffer, 1);
  std::span<const SendRequest> requests;
  EXPECT_EQ(batch_.translate(requests), EINVAL);
  batch_.end();

  batch_.start();
  std::vector<ibv_sge> many(kMaxSge + 1, sges_[0]);
  batch_.add(IBV_WR_SEND, 1, 0);
  batch_.set_sge_list(many.data(), many.size());
  EXPECT_EQ(batch_.translate(requests), EINVAL);
}

TEST_F(SendWrBatchTest, AnOpcodeTheHcaLacksIsRefusedAtTranslation) {
  batch_.add(IBV_WR_TSO, 1, 0);
  std::span<const SendRequest> requests;
  EXPECT_EQ(batch_.translate(requests), EINVAL);
}

TEST_F(SendWrBatchTest, EndForgetsTheBatch) {
  batch_.add(IBV_WR_SEND, 1, 0);
  batch_.fail(EINVAL);
  batch_.end();
  batch_.start();
  std::span<const SendRequest> requests;
  EXPECT_EQ(batch_.translate(requests), 0);
  EXPECT_TRUE(requests.empty());
}

TEST(SendWrTranslation, InlineBytesAreGatheredFromEverySge) {
  uint8_t a[3] = {1, 2, 3}, b[2] = {4, 5};
  ibv_sge list[] = {{reinterpret_cast<uintptr_t>(a), 3, 0}, {reinterpret_cast<uintptr_t>(b), 2, 0}};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_INLINE;
  wr.sg_list = list;
  wr.num_sge = 2;
  Translated out;
  ASSERT_EQ(translate_twin(wr, out), 0);
  ASSERT_EQ(out.request.inline_data.size(), 5u);
  EXPECT_EQ(out.request.inline_data[3], 4);
  EXPECT_EQ(out.request.sges.size(), 2u);
  wr.num_sge = kMaxSge + 1;
  EXPECT_EQ(translate_twin(wr, out), EINVAL);
  wr.num_sge = 1;
  wr.sg_list = nullptr;
  EXPECT_EQ(translate_twin(wr, out), EINVAL);
}

}  // namespace
}  // namespace softverbs::provider
