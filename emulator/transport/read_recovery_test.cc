// Lost RDMA READ responses: the requester keeps what arrives past a gap and
// asks again for the gaps only (read_arrivals.h).
#include <algorithm>

#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

using packet::Opcode;

constexpr uint32_t kMtu = 256;

bool is_read_response(Opcode op) {
  return op == Opcode::kRcReadResponseFirst || op == Opcode::kRcReadResponseMiddle ||
         op == Opcode::kRcReadResponseLast || op == Opcode::kRcReadResponseOnly;
}

class ReadRecovery : public Transport {
 protected:
  // Drops the read responses whose PSN (offset from the READ's first) is in
  // `lost`, the first time each is sent.
  void lose_read_responses(std::vector<uint32_t> lost) {
    drop_ = [lost, seen = std::vector<uint32_t>{}](size_t,
                                                   const packet::DecodedPacket& p) mutable {
      if (!is_read_response(p.headers.bth.opcode)) return false;
      const uint32_t n = p.headers.bth.psn;
      if (std::find(lost.begin(), lost.end(), n) == lost.end()) return false;
      if (std::find(seen.begin(), seen.end(), n) != seen.end()) return false;
      seen.push_back(n);
      return true;
    };
  }

  SendRequest read_of(Endpoint& a, Endpoint& b, uint64_t offset, uint32_t length, Sge& sge,
                      uint64_t wr_id) {
    sge = Sge{reinterpret_cast<uint64_t>(a.buffer.data()) + offset, length, a.mr->lkey()};
    SendRequest rd;
    rd.wr_id = wr_id;
    rd.opcode = WrOpcode::kRdmaRead;
    rd.flags = kWrSignaled;
    rd.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data()) + offset;
    rd.rkey = b.mr->rkey();
    rd.sges = {&sge, 1};
    return rd;
  }

  std::vector<uint32_t> read_requests_sent() const {
    std::vector<uint32_t> psns;
    for (const Sent& s : sent_)
      if (s.opcode == Opcode::kRcReadRequest) psns.push_back(s.psn);
    return psns;
  }
  size_t read_responses_sent() const {
    size_t n = 0;
    for (const Sent& s : sent_) n += is_read_response(s.opcode);
    return n;
  }
};

// A 16-packet READ loses its 4th and 10th responses: the rest are kept, and
// the last response shows both gaps at once; the requester sends one READ
// request per gap, at the gap's PSN, and the responder answers only those.
TEST_F(ReadRecovery, EachGapIsAskedForAloneAndTheReadCompletesIntact) {
  Endpoint a = make_endpoint(16 * kMtu), b = make_endpoint(16 * kMtu);
  connect(a, b, 100, 500, Mtu::k256, /*timeout=*/14);
  fill(b.buffer, 3);
  lose_read_responses({103, 109});
  Sge sge;
  ASSERT_EQ(a.qp->post_send(read_of(a, b, 0, 16 * kMtu, sge, 1)), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c)) << "no timeout needed";
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.byte_len, 16 * kMtu);
  EXPECT_EQ(a.buffer, b.buffer);
  EXPECT_EQ(read_requests_sent(), (std::vector<uint32_t>{100, 103, 109}));
  EXPECT_EQ(read_responses_sent(), 16u + 2u) << "the gaps only, not the rest again";
  EXPECT_EQ(a.qp->counters().retransmit_timeouts, 0u);
  EXPECT_EQ(a.qp->counters().retransmitted_packets, 2u);
}

// The gap's own response is lost again: what was asked for never all comes
// back, so the local ACK timer asks again, still only for what is missing.
TEST_F(ReadRecovery, AGapLostTwiceIsAskedForAgainAfterTheTimeout) {
  Endpoint a = make_endpoint(8 * kMtu), b = make_endpoint(8 * kMtu);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/14);
  fill(b.buffer, 5);
  int losses = 0;
  drop_ = [&losses](size_t, const packet::DecodedPacket& p) {
    return is_read_response(p.headers.bth.opcode) && p.headers.bth.psn == 2 && ++losses <= 2;
  };
  Sge sge;
  ASSERT_EQ(a.qp->post_send(read_of(a, b, 0, 8 * kMtu, sge, 1)), 0);
  run_until_idle();
  Completion c;
  EXPECT_EQ(a.send_cq->poll(std::span<Completion>(&c, 1)), 0);
  advance((4096ull << 14) + 1000);  // past the local ACK timeout
  run_until_idle();
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(a.buffer, b.buffer);
  EXPECT_EQ(a.qp->counters().retransmit_timeouts, 1u);
  EXPECT_EQ(losses, 3) << "the third response for PSN 2 is the one kept";
}

// Two READs back to back, the first missing a response: the second's
// responses arrive while the first still lacks one and are not kept; when
// the first completes, the acknowledgement that passed it over asks for the
// second again at once, without waiting for the timer.
TEST_F(ReadRecovery, TheNextReadIsAskedForAgainWhenTheFirstCompletes) {
  Endpoint a = make_endpoint(8 * kMtu), b = make_endpoint(8 * kMtu);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/14);
  fill(b.buffer, 7);
  lose_read_responses({1});
  Sge first, second;
  ASSERT_EQ(a.qp->post_send(read_of(a, b, 0, 4 * kMtu, first, 1)), 0);
  ASSERT_EQ(a.qp->post_send(read_of(a, b, 4 * kMtu, 4 * kMtu, second, 2)), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  ASSERT_TRUE(poll_one(*a.send_cq, c)) << "no timeout needed";
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(a.buffer, b.buffer);
  EXPECT_EQ(a.qp->counters().retransmit_timeouts, 0u);
}

// Each gap asked for is a request sent again: a fault decision of its own
// (frame_identity.h), so a gap request a rule dropped is not dropped again
// for being the same request, round after round, until retry_cnt runs out.
TEST_F(ReadRecovery, EachGapAskedForIsANewAttempt) {
  Endpoint a = make_endpoint(16 * kMtu), b = make_endpoint(16 * kMtu);
  connect(a, b, 100, 500, Mtu::k256, /*timeout=*/14);
  lose_read_responses({103, 109});
  Sge sge;
  ASSERT_EQ(a.qp->post_send(read_of(a, b, 0, 16 * kMtu, sge, 1)), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(read_requests_sent(), (std::vector<uint32_t>{100, 103, 109}));
  EXPECT_EQ(a.qp->impl().requester.resend_rounds(), 2u) << "one per gap asked for";
}

}  // namespace
}  // namespace softverbs
