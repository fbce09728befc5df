// Mixed traffic under random faults: every WR completes, in order, once.
#include "emulator/transport/transport_test_fixture.h"

namespace softverbs {
namespace {

// Mixed RC traffic under every fault at once, on the manual clock: the run
// replays bit for bit, and a stall (outstanding packets with no timer to
// recover them) shows as a test failure, not a hang.
class TransportUnderFaults : public Transport, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    fault_plan_ = "seed=" + std::to_string(GetParam()) +
                  "; drop:p=0.05; dup:p=0.01; reorder:p=0.05,depth=3; corrupt:p=0.001";
    Transport::SetUp();
  }
};

// Seed 8 once found responses that acknowledged a SEND without moving the
// unacknowledged PSN, leaving no timer to recover a lost READ response.
INSTANTIATE_TEST_SUITE_P(Seeds, TransportUnderFaults, ::testing::Values(1, 5, 8));

TEST_P(TransportUnderFaults, MixedTrafficCompletesInOrderExactlyOnce) {
  const size_t bytes = 1 << 20;
  Endpoint a = make_endpoint(bytes), b = make_endpoint(bytes);
  connect(a, b, 0xffff00, 0x000100, Mtu::k1024, /*timeout=*/10, /*retry=*/7);
  uint64_t rng = 99;
  auto next = [&rng](uint64_t n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % n;
  };
  uint64_t wr_id = 0;
  for (int round = 0; round < 200; ++round) {
    const int batch = 1 + static_cast<int>(next(8));
    std::vector<uint64_t> expected;
    for (int i = 0; i < batch; ++i) {
      const uint32_t len = 1 + static_cast<uint32_t>(next(64 * 1024));
      const uint64_t off = next(bytes - len);
      Sge s{reinterpret_cast<uint64_t>(a.buffer.data()) + off, len, a.mr->lkey()};
      SendRequest wr;
      wr.wr_id = ++wr_id;
      wr.flags = kWrSignaled;
      wr.sges = {&s, 1};
      wr.rkey = b.mr->rkey();
      wr.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data()) + next(bytes - len);
      switch (next(4)) {
        case 0: wr.opcode = WrOpcode::kRdmaWrite; break;
        case 1: wr.opcode = WrOpcode::kRdmaRead; break;
        case 2: {
          wr.opcode = WrOpcode::kAtomicFetchAdd;
          s.length = 8;
          s.addr &= ~7ull;
          wr.remote_addr &= ~7ull;
          wr.compare_add = 1;
          break;
        }
        default: {
          wr.opcode = WrOpcode::kSend;
          Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), static_cast<uint32_t>(bytes),
                b.mr->lkey()};
          ASSERT_EQ(b.qp->post_recv({wr_id, {&r, 1}}), 0);
        }
      }
      ASSERT_EQ(a.qp->post_send(wr), 0);
      expected.push_back(wr_id);
    }
    for (uint64_t id : expected) {
      Completion c{};
      bool got = false;
      for (int step = 0; step < 20000 && !got; ++step) {
        got = a.send_cq->poll(std::span<Completion>(&c, 1)) == 1;
        if (!got && wire_->queued() == 0 && !injector_->has_deferred()) {
          // Nothing on the wire: only a timer can move things now.
          QpImpl& qp = a.qp->impl();
          const uint32_t una = qp.completer.unacked_psn(), next = qp.requester.next_psn();
          ASSERT_TRUE(una == next || qp.completer.timer_armed())
              << "round " << round << ": packets outstanding (una " << una << ", next " << next
              << ") and no timer to recover them";
          advance(4096ull << 10);
        } else if (!got) {
          advance(20'000);  // lets delayed and reordered frames go
        }
      }
      ASSERT_TRUE(got) << "round " << round << ": WR " << id << " never completed";
      ASSERT_EQ(c.status, WcStatus::kSuccess) << "round " << round << " WR " << id;
      ASSERT_EQ(c.wr_id, id) << "completions out of order";
    }
  }
}

}  // namespace
}  // namespace softverbs
