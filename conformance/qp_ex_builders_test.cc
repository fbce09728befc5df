// The ibv_wr_* work request builders (ibv_wr_post(3)) against their
// ibv_post_send(3) twins: the same WR posted both ways moves the same bytes
// and completes the same way (status, opcode, byte_len, immediate data), with
// the wr_id and wr_flags the caller set before each builder. ibv_wr_abort
// discards the batch; a batch ibv_wr_complete refuses posts nothing.
#include <endian.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "conformance/peer_pair.h"

namespace softverbs::conformance {
namespace {

constexpr int kAllAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                           IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
constexpr uint64_t kRcOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                            IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                            IBV_QP_EX_WITH_RDMA_READ;
constexpr uint64_t kAtomicOps =
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
constexpr uint32_t kLength = 300;
constexpr uint32_t kInlineLength = 48;
constexpr uint64_t kAtomicStart = 100;

// How a WR's data is given: one SGE, two, or inline (one or two buffers).
enum class Data { kSge, kSgeList, kInline, kInlineList };

const char* data_name(Data data) {
  switch (data) {
    case Data::kSge: return "sge";
    case Data::kSgeList: return "sge list";
    case Data::kInline: return "inline";
    case Data::kInlineList: return "inline list";
  }
  return "?";
}

// Where one of the twins puts its data; both use the same bytes.
struct Lane {
  uint64_t wr_id;
  uint64_t local_offset;
  uint64_t remote_offset;
};
constexpr Lane kPostedLane{1001, 0, 64 * 1024};
constexpr Lane kBuiltLane{2002, 8 * 1024, 128 * 1024};

bool is_atomic(ibv_wr_opcode op) {
  return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}
bool needs_receive(ibv_wr_opcode op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}
bool has_imm(ibv_wr_opcode op) {
  return op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}
uint32_t length_of(ibv_wr_opcode op, Data data) {
  if (is_atomic(op)) return 8;
  return data == Data::kInline || data == Data::kInlineList ? kInlineLength : kLength;
}

bool device_has_atomics() {
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  ibv_device_attr attr{};
  return context && ibv_query_device(context.get(), &attr) == 0 &&
         attr.atomic_cap != IBV_ATOMIC_NONE;
}

PairOptions builder_options(uint64_t send_ops) {
  RcParameters params;
  params.access = kAllAccess;
  PairOptions options = symmetric_options(params);
  options.local.buffer_access = options.remote.buffer_access = kAllAccess;
  options.local.send_ops_flags = send_ops;
  options.local.max_send_sge = 2;
  options.local.max_inline_data = kInlineLength;
  return options;
}

// The local SGEs of a lane's data: [offset, offset+length), split in two
// for the list forms.
std::vector<ibv_sge> lane_sges(const Endpoint& local, const Lane& lane, uint32_t length,
                               Data data) {
  const uint64_t base = local.buffer().address() + lane.local_offset;
  const uint32_t lkey = local.buffer().lkey();
  if (data == Data::kSge || data == Data::kInline) return {{base, length, lkey}};
  const uint32_t first = length / 3;
  return {{base, first, lkey}, {base + first, length - first, lkey}};
}

void post_with_ibv_post_send(Endpoint& local, ibv_wr_opcode op, Data data, uint32_t length) {
  SendSpec spec;
  spec.wr_id = kPostedLane.wr_id;
  spec.opcode = op;
  spec.length = length;
  spec.local_offset = kPostedLane.local_offset;
  spec.remote_offset = kPostedLane.remote_offset;
  spec.imm_data = htobe32(0x5eed);
  spec.compare_add = op == IBV_WR_ATOMIC_CMP_AND_SWP ? kAtomicStart : 7;
  spec.swap = 0xabc;
  ibv_sge unused{};
  ibv_send_wr wr = local.make_send_wr(spec, unused);
  std::vector<ibv_sge> sges = lane_sges(local, kPostedLane, length, data);
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  if (data == Data::kInline || data == Data::kInlineList) wr.send_flags |= IBV_SEND_INLINE;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(0, ibv_post_send(local.qp(), &wr, &bad));
}

void build_operation(ibv_qp_ex* qpx, ibv_wr_opcode op, uint32_t rkey, uint64_t addr) {
  switch (op) {
    case IBV_WR_SEND: ibv_wr_send(qpx); break;
    case IBV_WR_SEND_WITH_IMM: ibv_wr_send_imm(qpx, htobe32(0x5eed)); break;
    case IBV_WR_RDMA_WRITE: ibv_wr_rdma_write(qpx, rkey, addr); break;
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      ibv_wr_rdma_write_imm(qpx, rkey, addr, htobe32(0x5eed));
      break;
    case IBV_WR_RDMA_READ: ibv_wr_rdma_read(qpx, rkey, addr); break;
    case IBV_WR_ATOMIC_CMP_AND_SWP: ibv_wr_atomic_cmp_swp(qpx, rkey, addr, kAtomicStart, 0xabc); break;
    case IBV_WR_ATOMIC_FETCH_AND_ADD: ibv_wr_atomic_fetch_add(qpx, rkey, addr, 7); break;
    default: FAIL() << "no builder for opcode " << op;
  }
}

void set_data(ibv_qp_ex* qpx, const std::vector<ibv_sge>& sges, Data data) {
  std::vector<ibv_data_buf> buffers;
  for (const ibv_sge& sge : sges)
    buffers.push_back({reinterpret_cast<void*>(sge.addr), sge.length});
  switch (data) {
    case Data::kSge: ibv_wr_set_sge(qpx, sges[0].lkey, sges[0].addr, sges[0].length); break;
    case Data::kSgeList: ibv_wr_set_sge_list(qpx, sges.size(), sges.data()); break;
    case Data::kInline: ibv_wr_set_inline_data(qpx, buffers[0].addr, buffers[0].length); break;
    case Data::kInlineList: ibv_wr_set_inline_data_list(qpx, buffers.size(), buffers.data()); break;
  }
}

void post_with_builders(Endpoint& local, ibv_wr_opcode op, Data data, uint32_t length) {
  ibv_qp_ex* qpx = local.qp_ex();
  ASSERT_NE(qpx, nullptr);
  ibv_wr_start(qpx);
  qpx->wr_id = kBuiltLane.wr_id;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  build_operation(qpx, op, local.remote().qp.rkey, local.remote().qp.addr + kBuiltLane.remote_offset);
  set_data(qpx, lane_sges(local, kBuiltLane, length, data), data);
  ASSERT_EQ(0, ibv_wr_complete(qpx));
}

// Sets up a lane's memory (and receive), before either twin posts.
void prepare_lane(Endpoint& local, RemoteEndpoint& remote, const Lane& lane, ibv_wr_opcode op,
                  uint32_t length) {
  if (op == IBV_WR_RDMA_READ) {
    ASSERT_EQ(0, remote.fill(lane.remote_offset, length, 77)) << remote.why();
    local.fill_constant(lane.local_offset, length, 0);
  } else if (is_atomic(op)) {
    ASSERT_EQ(0, remote.write_word(lane.remote_offset, kAtomicStart)) << remote.why();
    local.write_word(lane.local_offset, 0);
  } else {
    local.fill(lane.local_offset, length, 77);
    ASSERT_EQ(0, remote.fill_constant(lane.remote_offset, length, 0)) << remote.why();
  }
  if (needs_receive(op)) {
    ASSERT_EQ(0, remote.post_recv({lane.wr_id, lane.remote_offset, kLength})) << remote.why();
  }
}

struct Completions {
  ibv_wc send{};
  ibv_wc recv{};
};

Completions collect(Endpoint& local, RemoteEndpoint& remote, ibv_wr_opcode op) {
  Completions out;
  std::vector<ibv_wc> wcs;
  EXPECT_EQ(0, local.poll(Queue::kSend, 1, wcs));
  if (!wcs.empty()) out.send = wcs[0];
  if (needs_receive(op)) {
    wcs.clear();
    EXPECT_EQ(0, remote.poll(Queue::kRecv, 1, wcs)) << remote.why();
    if (!wcs.empty()) out.recv = wcs[0];
  }
  return out;
}

void expect_lane_data(Endpoint& local, RemoteEndpoint& remote, const Lane& lane,
                      ibv_wr_opcode op, uint32_t length) {
  std::optional<ByteMismatch> mismatch;
  if (op == IBV_WR_RDMA_READ) {
    mismatch = local.check(lane.local_offset, length, 77);
  } else if (is_atomic(op)) {
    EXPECT_EQ(local.read_word(lane.local_offset), kAtomicStart);
    uint64_t word = 0;
    EXPECT_EQ(0, remote.read_word(lane.remote_offset, word)) << remote.why();
    EXPECT_EQ(word, op == IBV_WR_ATOMIC_CMP_AND_SWP ? 0xabcu : kAtomicStart + 7);
  } else {
    EXPECT_EQ(0, remote.check(lane.remote_offset, length, 77, mismatch)) << remote.why();
  }
  EXPECT_FALSE(mismatch) << "wr_id " << lane.wr_id << ": " << describe_mismatch(*mismatch);
}

void expect_twins(const Completions& posted, const Completions& built, ibv_wr_opcode op) {
  expect_completion(posted.send, kPostedLane.wr_id, IBV_WC_SUCCESS, "ibv_post_send");
  expect_completion(built.send, kBuiltLane.wr_id, IBV_WC_SUCCESS, "ibv_wr_complete");
  EXPECT_EQ(posted.send.opcode, built.send.opcode);
  if (op == IBV_WR_RDMA_READ || is_atomic(op)) {
    EXPECT_EQ(posted.send.byte_len, built.send.byte_len);
  }
  if (!needs_receive(op)) return;
  expect_completion(posted.recv, kPostedLane.wr_id, IBV_WC_SUCCESS, "receive of the twin");
  expect_completion(built.recv, kBuiltLane.wr_id, IBV_WC_SUCCESS, "receive of the built WR");
  EXPECT_EQ(posted.recv.opcode, built.recv.opcode);
  EXPECT_EQ(posted.recv.byte_len, built.recv.byte_len);
  EXPECT_EQ(posted.recv.wc_flags & IBV_WC_WITH_IMM, built.recv.wc_flags & IBV_WC_WITH_IMM);
  if (has_imm(op)) {
    EXPECT_TRUE(built.recv.wc_flags & IBV_WC_WITH_IMM);
    EXPECT_EQ(posted.recv.imm_data, built.recv.imm_data);
  }
}

// Posts `op` once with ibv_post_send and once with the builders, for every
// way of giving its data, and compares the two.
void run_twins(ibv_wr_opcode op, std::vector<Data> forms, uint64_t send_ops) {
  with_connected_pair(builder_options(send_ops), [&](Endpoint& local, RemoteEndpoint& remote,
                                                     const EndpointInfo&) {
    for (Data data : forms) {
      SCOPED_TRACE(data_name(data));
      const uint32_t length = length_of(op, data);
      prepare_lane(local, remote, kPostedLane, op, length);
      prepare_lane(local, remote, kBuiltLane, op, length);
      post_with_ibv_post_send(local, op, data, length);
      const Completions posted = collect(local, remote, op);
      post_with_builders(local, op, data, length);
      const Completions built = collect(local, remote, op);
      expect_twins(posted, built, op);
      expect_lane_data(local, remote, kPostedLane, op, length);
      expect_lane_data(local, remote, kBuiltLane, op, length);
    }
  });
}

const std::vector<Data> kEveryForm = {Data::kSge, Data::kSgeList, Data::kInline,
                                      Data::kInlineList};

TEST(WrBuilders, SendMatchesItsTwin) { run_twins(IBV_WR_SEND, kEveryForm, kRcOps); }
TEST(WrBuilders, SendImmMatchesItsTwin) { run_twins(IBV_WR_SEND_WITH_IMM, kEveryForm, kRcOps); }
TEST(WrBuilders, RdmaWriteMatchesItsTwin) { run_twins(IBV_WR_RDMA_WRITE, kEveryForm, kRcOps); }
TEST(WrBuilders, RdmaWriteImmMatchesItsTwin) {
  run_twins(IBV_WR_RDMA_WRITE_WITH_IMM, kEveryForm, kRcOps);
}
TEST(WrBuilders, RdmaReadMatchesItsTwin) {
  run_twins(IBV_WR_RDMA_READ, {Data::kSge, Data::kSgeList}, kRcOps);
}

TEST(WrBuilders, AtomicsMatchTheirTwins) {
  if (!device_has_atomics()) GTEST_SKIP() << "the device has no atomics";
  run_twins(IBV_WR_ATOMIC_FETCH_AND_ADD, {Data::kSge}, kRcOps | kAtomicOps);
  run_twins(IBV_WR_ATOMIC_CMP_AND_SWP, {Data::kSge}, kRcOps | kAtomicOps);
}

// ibv_wr_post(3): wr_id and wr_flags are read by each builder call.
TEST(WrBuilders, WrIdAndFlagsAreReadAtEachBuilder) {
  with_connected_pair(builder_options(kRcOps), [&](Endpoint& local, RemoteEndpoint&,
                                                   const EndpointInfo&) {
    ibv_qp_ex* qpx = local.qp_ex();
    const uint64_t remote = local.remote().qp.addr;
    ibv_wr_start(qpx);
    for (uint64_t id = 1; id <= 3; ++id) {
      qpx->wr_id = id;
      qpx->wr_flags = id == 2 ? 0 : IBV_SEND_SIGNALED;  // the middle one unsignaled
      ibv_wr_rdma_write(qpx, local.remote().qp.rkey, remote + id * 64);
      ibv_wr_set_sge(qpx, local.buffer().lkey(), local.buffer().address(), 8);
    }
    ASSERT_EQ(0, ibv_wr_complete(qpx));
    std::vector<ibv_wc> wcs;
    ASSERT_EQ(0, local.poll(Queue::kSend, 2, wcs));
    expect_completion(wcs[0], 1, IBV_WC_SUCCESS, "first");
    expect_completion(wcs[1], 3, IBV_WC_SUCCESS, "third");
    EXPECT_EQ(ETIMEDOUT, local.poll(Queue::kSend, 1, wcs, std::chrono::milliseconds(200)));
  });
}

// ibv_wr_post(3): ibv_wr_abort discards everything since ibv_wr_start.
TEST(WrBuilders, AbortDiscardsTheBatch) {
  with_connected_pair(builder_options(kRcOps), [&](Endpoint& local, RemoteEndpoint& remote,
                                                   const EndpointInfo&) {
    ibv_qp_ex* qpx = local.qp_ex();
    ASSERT_EQ(0, remote.post_recv({1, 0, kLength})) << remote.why();
    local.fill(0, 16, 5);
    ibv_wr_start(qpx);
    qpx->wr_id = 10;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, local.buffer().lkey(), local.buffer().address(), 16);
    ibv_wr_abort(qpx);
    std::vector<ibv_wc> wcs;
    EXPECT_EQ(ETIMEDOUT, local.poll(Queue::kSend, 1, wcs, std::chrono::milliseconds(300)));
    // The receive is still there for the next SEND, which is the only one.
    ibv_wr_start(qpx);
    qpx->wr_id = 11;
    ibv_wr_send(qpx);
    ibv_wr_set_sge(qpx, local.buffer().lkey(), local.buffer().address(), 4);
    ASSERT_EQ(0, ibv_wr_complete(qpx));
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, wcs));
    expect_completion(wcs[0], 11, IBV_WC_SUCCESS, "send after the abort");
    wcs.clear();
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, wcs)) << remote.why();
    EXPECT_EQ(wcs[0].byte_len, 4u);
  });
}

// ibv_wr_post(3): a failure found at ibv_wr_complete aborts the entire
// posting: the valid WRs before the bad one are not executed either.
TEST(WrBuilders, ARefusedBatchPostsNothing) {
  with_connected_pair(builder_options(kRcOps), [&](Endpoint& local, RemoteEndpoint& remote,
                                                   const EndpointInfo&) {
    ibv_qp_ex* qpx = local.qp_ex();
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(0, ibv_query_qp(local.qp(), &attr, IBV_QP_CAP, &init));
    ASSERT_EQ(0, remote.fill_constant(0, 64, 0)) << remote.why();
    local.fill(0, 64, 9);
    std::vector<ibv_sge> too_many(attr.cap.max_send_sge + 1,
                                  {local.buffer().address(), 1, local.buffer().lkey()});
    ibv_wr_start(qpx);
    qpx->wr_id = 1;
    qpx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qpx, local.remote().qp.rkey, local.remote().qp.addr);
    ibv_wr_set_sge(qpx, local.buffer().lkey(), local.buffer().address(), 64);
    qpx->wr_id = 2;
    ibv_wr_rdma_write(qpx, local.remote().qp.rkey, local.remote().qp.addr + 64);
    ibv_wr_set_sge_list(qpx, too_many.size(), too_many.data());
    EXPECT_NE(0, ibv_wr_complete(qpx));

    // More WRs than the send queue holds: ENOMEM, and again nothing posted.
    ibv_wr_start(qpx);
    for (uint32_t i = 0; i <= attr.cap.max_send_wr; ++i) {
      qpx->wr_id = 100 + i;
      ibv_wr_rdma_write(qpx, local.remote().qp.rkey, local.remote().qp.addr);
      ibv_wr_set_sge(qpx, local.buffer().lkey(), local.buffer().address(), 64);
    }
    EXPECT_EQ(ENOMEM, ibv_wr_complete(qpx));

    std::vector<ibv_wc> wcs;
    EXPECT_EQ(ETIMEDOUT, local.poll(Queue::kSend, 1, wcs, std::chrono::milliseconds(300)));
    std::optional<ByteMismatch> mismatch;
    EXPECT_EQ(0, remote.check_constant(0, 64, 0, mismatch)) << remote.why();
    EXPECT_FALSE(mismatch) << "a refused batch wrote: " << describe_mismatch(*mismatch);
  });
}

}  // namespace
}  // namespace softverbs::conformance
