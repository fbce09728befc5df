// Extended CQs (ibv_create_cq_ex(3)): the creation limits, the polling
// iterator (ibv_start_poll / ibv_next_poll / ibv_end_poll) whose read_*
// functions report exactly what ibv_poll_cq reports for the same
// completion, completion timestamps taken when the completion is generated,
// ibv_resize_cq(3) keeping pending completions, ibv_modify_cq moderation
// limits, and IBV_EVENT_CQ_ERR when a CQ overruns.
#include <endian.h>
#include <gtest/gtest.h>
#include <time.h>

#include <thread>
#include <vector>

#include "conformance/device_fixture.h"
#include "conformance/peer_pair.h"

namespace softverbs::conformance {
namespace {

constexpr uint64_t kStandard = IBV_WC_STANDARD_FLAGS;
constexpr auto kEmptyWait = std::chrono::milliseconds(200);

ibv_device_attr_ex query_ex(ibv_context* context) {
  ibv_device_attr_ex attr{};
  EXPECT_EQ(0, ibv_query_device_ex(context, nullptr, &attr));
  return attr;
}

uint64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + ts.tv_nsec;
}

class CqExTest : public DeviceTest {
 protected:
  ibv_cq_ex* create(int cqe, uint64_t wc_flags, uint32_t comp_vector = 0) {
    ibv_cq_init_attr_ex attr{};
    attr.cqe = cqe;
    attr.wc_flags = wc_flags;
    attr.comp_vector = comp_vector;
    errno = 0;
    ibv_cq_ex* cq = ibv_create_cq_ex(context(), &attr);
    last_error_ = cq ? 0 : errno;
    if (cq) owned_.emplace_back(ibv_cq_ex_to_cq(cq));
    return cq;
  }
  std::vector<CqPtr> owned_;
};

TEST_F(CqExTest, CreationLimits) {
  if (!create(16, kStandard) && last_error_ == EOPNOTSUPP)
    GTEST_SKIP() << "the device has no extended CQs";
  EXPECT_EQ(create(0, kStandard), nullptr);
  EXPECT_EQ(last_error_, EINVAL);
  EXPECT_EQ(create(device_attr().max_cqe + 1, kStandard), nullptr);
  EXPECT_EQ(last_error_, EINVAL);
  EXPECT_EQ(create(16, kStandard, static_cast<uint32_t>(context()->num_comp_vectors)), nullptr);
  EXPECT_EQ(last_error_, EINVAL);
  EXPECT_EQ(create(16, kStandard | (uint64_t{1} << 40)), nullptr);  // no such flag
  EXPECT_EQ(last_error_, EOPNOTSUPP);

  ibv_cq_ex* cq = create(100, kStandard);
  ASSERT_NE(cq, nullptr);
  EXPECT_GE(cq->cqe, 100);
  // ibv_cq_ex_to_cq gives a CQ every plain verb takes.
  ibv_wc wc;
  EXPECT_EQ(0, ibv_poll_cq(ibv_cq_ex_to_cq(cq), 1, &wc));
  ibv_poll_cq_attr poll_attr{};
  EXPECT_EQ(ENOENT, ibv_start_poll(cq, &poll_attr));  // nothing yet: no end_poll
}

TEST_F(CqExTest, ModerationWithinTheAdvertisedCaps) {
  const ibv_device_attr_ex attr = query_ex(context());
  if (attr.cq_mod_caps.max_cq_count == 0) GTEST_SKIP() << "the device has no CQ moderation";
  ibv_cq_ex* cq = create(16, kStandard);
  ASSERT_NE(cq, nullptr);
  ibv_modify_cq_attr modify{};
  modify.attr_mask = IBV_CQ_ATTR_MODERATE;
  modify.moderate = {attr.cq_mod_caps.max_cq_count, attr.cq_mod_caps.max_cq_period};
  EXPECT_EQ(0, ibv_modify_cq(ibv_cq_ex_to_cq(cq), &modify));
  if (attr.cq_mod_caps.max_cq_period < UINT16_MAX) {
    modify.moderate.cq_period = attr.cq_mod_caps.max_cq_period + 1;
    EXPECT_EQ(EINVAL, ibv_modify_cq(ibv_cq_ex_to_cq(cq), &modify));
  }
}

// --- two processes -----------------------------------------------------------

// What one completion says, read either way.
struct Reading {
  uint64_t wr_id = 0;
  ibv_wc_status status = IBV_WC_GENERAL_ERR;
  ibv_wc_opcode opcode = IBV_WC_SEND;
  uint32_t vendor_err = 0, byte_len = 0, imm_data = 0, qp_num = 0, src_qp = 0;
  unsigned int wc_flags = 0;
  uint32_t slid = 0;
  uint8_t sl = 0, dlid_path_bits = 0;
};

Reading from_wc(const ibv_wc& wc) {
  return {wc.wr_id, wc.status, wc.opcode, wc.vendor_err, wc.byte_len,
          (wc.wc_flags & IBV_WC_WITH_IMM) ? wc.imm_data : 0u, wc.qp_num, wc.src_qp,
          wc.wc_flags, wc.slid, wc.sl, wc.dlid_path_bits};
}

Reading from_iterator(ibv_cq_ex* cq) {
  const unsigned int flags = ibv_wc_read_wc_flags(cq);
  return {cq->wr_id, cq->status, ibv_wc_read_opcode(cq), ibv_wc_read_vendor_err(cq),
          ibv_wc_read_byte_len(cq), (flags & IBV_WC_WITH_IMM) ? ibv_wc_read_imm_data(cq) : 0u,
          ibv_wc_read_qp_num(cq), ibv_wc_read_src_qp(cq), flags, ibv_wc_read_slid(cq),
          ibv_wc_read_sl(cq), ibv_wc_read_dlid_path_bits(cq)};
}

void expect_same(const Reading& a, const Reading& b) {
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.opcode, b.opcode);
  EXPECT_EQ(a.vendor_err, b.vendor_err);
  EXPECT_EQ(a.byte_len, b.byte_len);
  EXPECT_EQ(a.imm_data, b.imm_data);
  EXPECT_EQ(a.qp_num, b.qp_num);
  EXPECT_EQ(a.src_qp, b.src_qp);
  EXPECT_EQ(a.wc_flags, b.wc_flags);
  EXPECT_EQ(a.slid, b.slid);
  EXPECT_EQ(a.sl, b.sl);
  EXPECT_EQ(a.dlid_path_bits, b.dlid_path_bits);
}

// Polls one completion with the iterator, retrying while ENOENT.
template <class Read>
int poll_iterator(ibv_cq_ex* cq, size_t count, Read&& read,
                  std::chrono::milliseconds timeout = kCompletionTimeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  ibv_poll_cq_attr attr{};
  int rc;
  while ((rc = ibv_start_poll(cq, &attr)) == ENOENT) {
    if (std::chrono::steady_clock::now() > deadline) return ETIMEDOUT;
    std::this_thread::yield();
  }
  if (rc) return rc;
  size_t got = 0;
  do {
    read(cq);
    if (++got == count) break;
    while ((rc = ibv_next_poll(cq)) == ENOENT && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
  } while (rc == 0);
  ibv_end_poll(cq);
  return got == count ? 0 : (rc ? rc : ETIMEDOUT);
}

PairOptions ex_cq_options(uint64_t wc_flags) {
  PairOptions options = symmetric_options();
  options.local.cq_wc_flags = wc_flags;
  return options;
}

bool has_extended_cqs(uint64_t wc_flags) {
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  if (!context) return false;
  ibv_cq_init_attr_ex attr{};
  attr.cqe = 4;
  attr.wc_flags = wc_flags;
  ibv_cq_ex* cq = ibv_create_cq_ex(context.get(), &attr);
  if (!cq) return false;
  ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
  return true;
}

// A SEND with immediate from the peer, received here: the receive
// completion, read with ibv_poll_cq or with the iterator.
Reading receive_one(Endpoint& local, RemoteEndpoint& remote, uint64_t wr_id, bool iterator) {
  EXPECT_EQ(0, local.post_recv({wr_id, 0, 4096}));
  SendSpec spec;
  spec.wr_id = wr_id;
  spec.opcode = IBV_WR_SEND_WITH_IMM;
  spec.length = 777;
  spec.imm_data = htobe32(0xc0ffee);
  EXPECT_EQ(0, remote.post_send(spec)) << remote.why();
  Reading reading;
  if (iterator) {
    EXPECT_EQ(0, poll_iterator(local.recv_cq_ex(), 1,
                               [&](ibv_cq_ex* cq) { reading = from_iterator(cq); }));
  } else {
    std::vector<ibv_wc> wcs;
    EXPECT_EQ(0, local.poll(Queue::kRecv, 1, wcs));
    if (!wcs.empty()) reading = from_wc(wcs[0]);
  }
  std::vector<ibv_wc> sent;
  EXPECT_EQ(0, remote.poll(Queue::kSend, 1, sent)) << remote.why();
  return reading;
}

// An RDMA READ from the peer: the send completion, read either way.
Reading read_one(Endpoint& local, uint64_t wr_id, bool iterator) {
  SendSpec spec;
  spec.wr_id = wr_id;
  spec.opcode = IBV_WR_RDMA_READ;
  spec.length = 333;
  EXPECT_EQ(0, local.post_send(spec));
  Reading reading;
  if (iterator) {
    EXPECT_EQ(0, poll_iterator(local.send_cq_ex(), 1,
                               [&](ibv_cq_ex* cq) { reading = from_iterator(cq); }));
  } else {
    std::vector<ibv_wc> wcs;
    EXPECT_EQ(0, local.poll(Queue::kSend, 1, wcs));
    if (!wcs.empty()) reading = from_wc(wcs[0]);
  }
  return reading;
}

TEST(CqExPolling, EveryReadMatchesIbvPollCq) {
  if (!has_extended_cqs(kStandard)) GTEST_SKIP() << "the device has no extended CQs";
  with_connected_pair(ex_cq_options(kStandard), [](Endpoint& local, RemoteEndpoint& remote,
                                                   const EndpointInfo&) {
    const Reading plain_recv = receive_one(local, remote, 1, false);
    const Reading iterated_recv = receive_one(local, remote, 2, true);
    EXPECT_EQ(plain_recv.wr_id, 1u);
    EXPECT_EQ(iterated_recv.wr_id, 2u);
    EXPECT_EQ(iterated_recv.opcode, IBV_WC_RECV);
    EXPECT_EQ(iterated_recv.imm_data, htobe32(0xc0ffee));
    expect_same(plain_recv, iterated_recv);

    const Reading plain_read = read_one(local, 3, false);
    const Reading iterated_read = read_one(local, 4, true);
    EXPECT_EQ(iterated_read.wr_id, 4u);
    EXPECT_EQ(iterated_read.byte_len, 333u);
    expect_same(plain_read, iterated_read);
  });
}

// ibv_next_poll walks every completion there is, then says ENOENT; the
// batch still ends with ibv_end_poll.
TEST(CqExPolling, NextPollWalksEveryCompletion) {
  if (!has_extended_cqs(kStandard)) GTEST_SKIP() << "the device has no extended CQs";
  with_connected_pair(ex_cq_options(kStandard), [](Endpoint& local, RemoteEndpoint&,
                                                   const EndpointInfo&) {
    for (uint64_t id = 1; id <= 5; ++id) {
      SendSpec spec;
      spec.wr_id = id;
      spec.opcode = IBV_WR_RDMA_WRITE;
      spec.length = 8;
      ASSERT_EQ(0, local.post_send(spec));
    }
    std::vector<uint64_t> ids;
    ASSERT_EQ(0, poll_iterator(local.send_cq_ex(), 5,
                               [&](ibv_cq_ex* cq) { ids.push_back(cq->wr_id); }));
    EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
    ibv_poll_cq_attr attr{};
    EXPECT_EQ(ENOENT, ibv_start_poll(local.send_cq_ex(), &attr));
  });
}

// A completion timestamp is taken when the completion is generated, in HCA
// clock units (hca_core_clock kHz); the wall-clock one in ns of
// CLOCK_REALTIME. Both stay put however late the completion is polled.
TEST(CqExPolling, TimestampsAreTakenWhenTheCompletionIsGenerated) {
  const uint64_t flags = kStandard | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                         IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  if (!has_extended_cqs(flags)) GTEST_SKIP() << "the device has no completion timestamps";
  with_connected_pair(ex_cq_options(flags), [&](Endpoint& local, RemoteEndpoint&,
                                                const EndpointInfo&) {
    const ibv_device_attr_ex attr = query_ex(local.context());
    ASSERT_GT(attr.hca_core_clock, 0u);  // kHz
    const uint64_t before_ns = realtime_ns();
    for (uint64_t id = 1; id <= 8; ++id) {
      SendSpec spec;
      spec.wr_id = id;
      spec.opcode = IBV_WR_RDMA_WRITE;
      spec.length = 8;
      ASSERT_EQ(0, local.post_send(spec));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // completions wait
    std::vector<uint64_t> stamps, walls;
    ASSERT_EQ(0, poll_iterator(local.send_cq_ex(), 8, [&](ibv_cq_ex* cq) {
      stamps.push_back(ibv_wc_read_completion_ts(cq));
      walls.push_back(ibv_wc_read_completion_wallclock_ns(cq));
    }));
    const uint64_t polled_ns = realtime_ns();
    for (size_t i = 1; i < stamps.size(); ++i) EXPECT_GE(stamps[i], stamps[i - 1]) << i;
    for (uint64_t wall : walls) {
      EXPECT_GE(wall + 1'000'000'000ull, before_ns);   // near CLOCK_REALTIME...
      EXPECT_LE(wall + 100'000'000ull, polled_ns);     // ...and before the late poll
    }
    ibv_values_ex values{};
    values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
    if (ibv_query_rt_values_ex(local.context(), &values) == 0 &&
        (values.comp_mask & IBV_VALUES_MASK_RAW_CLOCK)) {
      const uint64_t now = static_cast<uint64_t>(values.raw_clock.tv_sec) *
                               attr.hca_core_clock * 1000 +
                           static_cast<uint64_t>(values.raw_clock.tv_nsec);
      // 100 ms in clock units: the stamps are older than the poll.
      EXPECT_GE(now - stamps.back(), attr.hca_core_clock * 100);
    }
  });
}

// ibv_resize_cq(3): the completions already in the CQ stay, in order; a
// size below their number is EINVAL.
TEST(CqResize, PendingCompletionsStay) {
  PairOptions options = symmetric_options();
  options.local.cq_depth = 64;
  with_connected_pair(options, [](Endpoint& local, RemoteEndpoint& remote, const EndpointInfo&) {
    constexpr uint64_t kCount = 10;
    for (uint64_t id = 0; id < kCount; ++id) ASSERT_EQ(0, local.post_recv({id, id * 64, 64}));
    for (uint64_t id = 0; id < kCount; ++id) {
      SendSpec spec;
      spec.wr_id = id;
      spec.length = static_cast<uint32_t>(id + 1);
      ASSERT_EQ(0, remote.post_send(spec)) << remote.why();
    }
    std::vector<ibv_wc> sent;
    ASSERT_EQ(0, remote.poll(Queue::kSend, kCount, sent)) << remote.why();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ibv_cq* cq = local.recv_cq();
    EXPECT_EQ(EINVAL, ibv_resize_cq(cq, 5));
    ASSERT_EQ(0, ibv_resize_cq(cq, static_cast<int>(kCount)));
    EXPECT_GE(cq->cqe, static_cast<int>(kCount));
    ASSERT_EQ(0, ibv_resize_cq(cq, 200));
    EXPECT_GE(cq->cqe, 200);
    EXPECT_EQ(EINVAL, ibv_resize_cq(cq, local.device_attr().max_cqe + 1));
    std::vector<ibv_wc> wcs;
    ASSERT_EQ(0, local.poll(Queue::kRecv, kCount, wcs));
    for (uint64_t id = 0; id < kCount; ++id) {
      expect_completion(wcs[id], id, IBV_WC_SUCCESS, "receive after resize");
      EXPECT_EQ(wcs[id].byte_len, id + 1);
    }
  });
}

// IBTA 11.2.1 / ibv_get_async_event(3): a CQ that overruns is in error and
// says so with IBV_EVENT_CQ_ERR.
TEST(CqOverrun, RaisesCqErr) {
  PairOptions options = symmetric_options();
  options.local.cq_depth = 8;
  options.local.max_send_wr = 64;
  with_connected_pair(options, [](Endpoint& local, RemoteEndpoint&, const EndpointInfo&) {
    const int capacity = local.send_cq()->cqe;
    if (capacity >= 64) GTEST_SKIP() << "the CQ got " << capacity << " entries";
    for (int id = 0; id <= capacity; ++id) {
      SendSpec spec;
      spec.wr_id = static_cast<uint64_t>(id);
      spec.opcode = IBV_WR_RDMA_WRITE;
      spec.length = 8;
      ASSERT_EQ(0, local.post_send(spec));
    }
    std::vector<AsyncEventRecord> others;
    const auto event = local.wait_for_async_event(IBV_EVENT_CQ_ERR, std::chrono::seconds(10),
                                                  &others);
    EXPECT_TRUE(event) << "no IBV_EVENT_CQ_ERR after " << capacity + 1 << " completions into "
                       << capacity << " entries";
  });
}

}  // namespace
}  // namespace softverbs::conformance
