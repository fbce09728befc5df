// IBV_SEND_INLINE on a WR whose local buffers receive data. ibv_post_send(3)
// makes the flag valid only for SEND and RDMA WRITE, whose payload it copies
// (and whose lkeys it skips). An RDMA READ or an atomic has no payload to
// copy: its SGEs are where the fetched data lands, so the flag is no way
// around their checks. On softverbs the flag is ignored there: the data
// lands in the SGEs' memory, lkeys and local write access are checked, and
// max_inline_data does not bound the READ. What other devices do with the
// flag on these opcodes is undefined by the man page, so the tests skip
// there.
#include <gtest/gtest.h>

#include <vector>

#include "conformance/peer_pair.h"

namespace softverbs::conformance {
namespace {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint32_t kMaxInline = 64;
constexpr uint32_t kReadLength = 8 * 1024;  // far above max_inline_data
constexpr uint64_t kResultOffset = 64 * 1024;
constexpr uint64_t kRemoteWord = 128 * 1024;
constexpr uint64_t kStartValue = 1000;
constexpr uint64_t kAdd = 7;
constexpr uint8_t kPoison = 0xa5;

PairOptions inline_options() {
  RcParameters params;
  params.access = kAllAccess;
  PairOptions options = symmetric_options(params);
  options.local.buffer_access = options.remote.buffer_access = kAllAccess;
  options.local.max_inline_data = kMaxInline;
  return options;
}

constexpr const char* kUndefinedElsewhere =
    "IBV_SEND_INLINE on a READ or an atomic is undefined by ibv_post_send(3); softverbs "
    "ignores it, other devices may not";

SendSpec inline_fetch_add() {
  SendSpec spec;
  spec.wr_id = 1;
  spec.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  spec.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  spec.local_offset = kResultOffset;
  spec.remote_offset = kRemoteWord;
  spec.compare_add = kAdd;
  return spec;
}

SendSpec inline_read() {
  SendSpec spec;
  spec.wr_id = 2;
  spec.opcode = IBV_WR_RDMA_READ;
  spec.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  spec.local_offset = kResultOffset;
  spec.length = kReadLength;
  return spec;
}

// Posts `spec` with its SGE's lkey replaced by one nobody registered.
Errno post_with_bad_lkey(Endpoint& local, const SendSpec& spec) {
  ibv_sge sge{};
  ibv_send_wr wr = local.make_send_wr(spec, sge);
  sge.lkey = ~local.buffer().lkey();
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(local.qp(), &wr, &bad);
}

// The fetched original value lands in the SGE's memory, as without the flag.
TEST(InlineFlag, AtomicWithInlineFlagFetchesIntoItsSge) {
  if (!soft_control_available()) GTEST_SKIP() << kUndefinedElsewhere;
  with_connected_pair(inline_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    ASSERT_EQ(0, remote.write_word(kRemoteWord, kStartValue)) << remote.why();
    local.fill_constant(kResultOffset, 8, kPoison);
    ASSERT_EQ(0, local.post_send(inline_fetch_add()));
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
    expect_completion(sent[0], 1, IBV_WC_SUCCESS, "fetch-and-add with IBV_SEND_INLINE");
    EXPECT_EQ(kStartValue, local.read_word(kResultOffset)) << "the original value";
    uint64_t now = 0;
    ASSERT_EQ(0, remote.read_word(kRemoteWord, now)) << remote.why();
    EXPECT_EQ(kStartValue + kAdd, now);
  });
}

// An SGE with an unknown lkey fails the atomic with a local protection
// error even with the flag: the value has nowhere to land.
TEST(InlineFlag, AtomicWithInlineFlagAndBadLkeyIsLocalProtectionError) {
  if (!soft_control_available()) GTEST_SKIP() << kUndefinedElsewhere;
  with_connected_pair(inline_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    ASSERT_EQ(0, remote.write_word(kRemoteWord, kStartValue)) << remote.why();
    ASSERT_EQ(0, post_with_bad_lkey(local, inline_fetch_add()));
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
    expect_completion(sent[0], 1, IBV_WC_LOC_PROT_ERR, "fetch-and-add into an unknown lkey");
    EXPECT_EQ(IBV_QPS_ERR, local.state()) << qp_state_name(local.state());
  });
}

// A READ with the flag and a length far above max_inline_data is posted
// and its data lands in its SGE; with an unknown lkey it fails with a local
// protection error and nothing is written.
TEST(InlineFlag, ReadWithInlineFlagUsesItsSgeWhateverItsLength) {
  if (!soft_control_available()) GTEST_SKIP() << kUndefinedElsewhere;
  with_connected_pair(inline_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    ASSERT_EQ(0, remote.fill(0, kReadLength, 33)) << remote.why();
    local.fill_constant(kResultOffset, kReadLength, kPoison);
    ASSERT_EQ(0, local.post_send(inline_read())) << "max_inline_data does not bound a READ";
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
    expect_completion(sent[0], 2, IBV_WC_SUCCESS, "READ with IBV_SEND_INLINE");
    auto wrong = local.check(kResultOffset, kReadLength, 33);
    EXPECT_FALSE(wrong) << describe_mismatch(*wrong);
  });
}

TEST(InlineFlag, ReadWithInlineFlagAndBadLkeyIsLocalProtectionError) {
  if (!soft_control_available()) GTEST_SKIP() << kUndefinedElsewhere;
  with_connected_pair(inline_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    ASSERT_EQ(0, remote.fill(0, kReadLength, 33)) << remote.why();
    local.fill_constant(kResultOffset, kReadLength, kPoison);
    SendSpec small = inline_read();
    small.length = kMaxInline;  // one an inline copy could hold
    ASSERT_EQ(0, post_with_bad_lkey(local, small));
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, sent));
    expect_completion(sent[0], 2, IBV_WC_LOC_PROT_ERR, "READ into an unknown lkey");
    auto untouched = local.check_constant(kResultOffset, kReadLength, kPoison);
    EXPECT_FALSE(untouched) << describe_mismatch(*untouched);
  });
}

// The ibv_wr_* builders: inline bytes given to a READ or an atomic name no
// memory to receive into, so ibv_wr_complete refuses the batch (EINVAL).
TEST(InlineFlag, BuildersRefuseInlineDataOnReadAndAtomic) {
  if (!soft_control_available()) GTEST_SKIP() << kUndefinedElsewhere;
  PairOptions options = inline_options();
  options.local.send_ops_flags = IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint&, const EndpointInfo& info) {
    ibv_qp_ex* qpx = local.qp_ex();
    ASSERT_NE(nullptr, qpx);
    uint64_t bytes = 0;
    ibv_wr_start(qpx);
    qpx->wr_id = 3;
    ibv_wr_rdma_read(qpx, info.qp.rkey, info.qp.addr);
    ibv_wr_set_inline_data(qpx, &bytes, sizeof(bytes));
    EXPECT_EQ(EINVAL, ibv_wr_complete(qpx)) << "READ";
    ibv_wr_start(qpx);
    qpx->wr_id = 4;
    ibv_wr_atomic_fetch_add(qpx, info.qp.rkey, info.qp.addr + kRemoteWord, kAdd);
    ibv_wr_set_inline_data(qpx, &bytes, sizeof(bytes));
    EXPECT_EQ(EINVAL, ibv_wr_complete(qpx)) << "fetch-and-add";
    std::vector<ibv_wc> sent;
    EXPECT_EQ(0, drain_completions(local.send_cq(), sent)) << "nothing was posted";
    EXPECT_EQ(IBV_QPS_RTS, local.state()) << qp_state_name(local.state());
  });
}

}  // namespace
}  // namespace softverbs::conformance
