// RC atomics between two processes (IBTA 9.4.5, 9.7.5.3; ibv_post_send(3)
// IBV_WR_ATOMIC_FETCH_AND_ADD / IBV_WR_ATOMIC_CMP_AND_SWP): the 64-bit word
// at the remote address is changed atomically and its original value lands
// in the local buffer. A responder answers a duplicate atomic request from
// the result it saved, never by executing it again (IBTA 9.7.5.3.2, C9-96),
// so an atomic whose acknowledgement is lost still takes effect once.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

constexpr int kAtomicAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

PairOptions atomic_options(uint8_t timeout = 17, uint8_t rd_atomic = 1) {
  RcParameters params;
  params.access = kAtomicAccess;
  params.timeout = timeout;
  params.max_rd_atomic = rd_atomic;
  params.max_dest_rd_atomic = rd_atomic;
  PairOptions options = symmetric_options(params);
  options.local.buffer_access = options.remote.buffer_access = kAtomicAccess;
  return options;
}

SendSpec fetch_add(uint64_t wr_id, uint64_t remote_offset, uint64_t add, uint64_t result_offset) {
  SendSpec spec;
  spec.wr_id = wr_id;
  spec.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  spec.remote_offset = remote_offset;
  spec.compare_add = add;
  spec.local_offset = result_offset;
  return spec;
}

SendSpec compare_swap(uint64_t wr_id, uint64_t remote_offset, uint64_t compare, uint64_t swap,
                      uint64_t result_offset) {
  SendSpec spec = fetch_add(wr_id, remote_offset, compare, result_offset);
  spec.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  spec.swap = swap;
  return spec;
}

bool device_has_atomics() {
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  ibv_device_attr attr{};
  return context && ibv_query_device(context.get(), &attr) == 0 &&
         attr.atomic_cap != IBV_ATOMIC_NONE;
}

// Frames this process's fault injector dropped on receipt so far (the
// counters live as long as the process).
uint64_t received_frames_dropped() {
  std::string stats;
  EXPECT_EQ(0, soft_control("stats", stats));
  return line_counter(stats, "faults rx:", "dropped").value_or(0);
}

// Runs one atomic and returns the original value it reported.
uint64_t run_atomic(Endpoint& local, const SendSpec& spec, ibv_wc_opcode expected_opcode) {
  local.write_word(spec.local_offset, 0x5a5a5a5a5a5a5a5aull);
  EXPECT_EQ(0, local.post_send(spec));
  std::vector<ibv_wc> done;
  EXPECT_EQ(0, local.poll(Queue::kSend, 1, done));
  if (done.empty()) return 0;
  expect_completion(done[0], spec.wr_id, IBV_WC_SUCCESS, "atomic " + std::to_string(spec.wr_id));
  EXPECT_EQ(expected_opcode, done[0].opcode) << describe_completion(done[0]);
  return local.read_word(spec.local_offset);
}

uint64_t remote_word(RemoteEndpoint& remote, uint64_t offset) {
  uint64_t value = 0;
  EXPECT_EQ(0, remote.read_word(offset, value)) << remote.why();
  return value;
}

// FETCH_AND_ADD adds (modulo 2^64) and returns the original; CMP_AND_SWP
// swaps only when the word equals `compare`, and returns the original
// either way.
TEST(Atomics, FetchAddAndCompareSwapReturnTheOriginalValue) {
  if (!device_has_atomics()) GTEST_SKIP() << "the device reports atomic_cap NONE";
  with_connected_pair(atomic_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    ASSERT_EQ(0, remote.write_word(64, 0x1000)) << remote.why();
    ASSERT_EQ(0, remote.write_word(72, ~0ull)) << remote.why();

    EXPECT_EQ(0x1000u, run_atomic(local, fetch_add(1, 64, 0x22, 0), IBV_WC_FETCH_ADD));
    EXPECT_EQ(0x1022u, remote_word(remote, 64));
    EXPECT_EQ(0x1022u, run_atomic(local, compare_swap(2, 64, 0x1022, 0xdeadbeefcafe, 8),
                                  IBV_WC_COMP_SWAP));
    EXPECT_EQ(0xdeadbeefcafeu, remote_word(remote, 64)) << "the equal compare swapped";
    EXPECT_EQ(0xdeadbeefcafeu,
              run_atomic(local, compare_swap(3, 64, 0x1022, 0x1, 16), IBV_WC_COMP_SWAP));
    EXPECT_EQ(0xdeadbeefcafeu, remote_word(remote, 64)) << "an unequal compare changed the word";
    EXPECT_EQ(~0ull, run_atomic(local, fetch_add(4, 72, 3, 24), IBV_WC_FETCH_ADD));
    EXPECT_EQ(2u, remote_word(remote, 72)) << "the add wraps modulo 2^64";
  });
}

class AtomicReplay : public ::testing::TestWithParam<ibv_wr_opcode> {};

// The requester's process drops the first ATOMIC ACKNOWLEDGE it receives
// (fault dir=rx,op=ATOMIC_ACKNOWLEDGE,nth=1): it times out and sends the
// atomic again; the responder recognizes the duplicate PSN and replays the
// saved original value. The word changes once, and the requester gets the
// value from before that change. (A compare-and-swap executed twice would
// report the swapped value instead.)
TEST_P(AtomicReplay, LostAtomicAcknowledgeIsReplayedAndTheWordChangesOnce) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  if (!device_has_atomics()) GTEST_SKIP() << "the device reports atomic_cap NONE";
  const ibv_wr_opcode opcode = GetParam();
  SoftControlReset reset(test_config().device_name);
  with_connected_pair(atomic_options(/*timeout=*/12), [&](Endpoint& local,
                                                          RemoteEndpoint& remote,
                                                          const EndpointInfo& info) {
    constexpr uint64_t kInitial = 1000;
    ASSERT_EQ(0, remote.write_word(0, kInitial)) << remote.why();
    const uint64_t dropped_before = received_frames_dropped();
    std::string reply;
    ASSERT_EQ(0, soft_control("fault set drop:dir=rx,op=ATOMIC_ACKNOWLEDGE,nth=1", reply))
        << reply;
    const bool is_add = opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
    const SendSpec spec = is_add ? fetch_add(1, 0, 7, 0) : compare_swap(1, 0, kInitial, 4242, 0);
    EXPECT_EQ(kInitial,
              run_atomic(local, spec, is_add ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP));
    EXPECT_EQ(is_add ? kInitial + 7 : 4242u, remote_word(remote, 0))
        << "the atomic took effect other than once";

    EXPECT_EQ(1u, received_frames_dropped() - dropped_before)
        << "the acknowledge was not dropped, so this tested no replay";
    std::string remote_stats;
    ASSERT_EQ(0, remote.control("stats", remote_stats)) << remote.why();
    EXPECT_EQ(1u, qp_counter(remote_stats, info.qp.qpn, "atomic_replays").value_or(0))
        << remote_stats;
  });
}

INSTANTIATE_TEST_SUITE_P(Operations, AtomicReplay,
                         ::testing::Values(IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP),
                         [](const auto& info) {
                           return info.param == IBV_WR_ATOMIC_FETCH_AND_ADD
                                      ? std::string("FetchAndAdd")
                                      : std::string("CompareAndSwap");
                         });

// Many atomics in flight (up to max_rd_atomic) with a third of the
// acknowledgements lost: every FETCH_AND_ADD still executes exactly once, in
// order, so the i-th returns the initial value plus i and the word ends at
// the initial value plus their number.
TEST(Atomics, FetchAddsUnderAcknowledgeLossEachExecuteExactlyOnceInOrder) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  if (!device_has_atomics()) GTEST_SKIP() << "the device reports atomic_cap NONE";
  constexpr uint64_t kAtomics = 64;
  constexpr uint64_t kInitial = 1ull << 40;
  SoftControlReset reset(test_config().device_name);
  PairOptions options = atomic_options(/*timeout=*/10, /*rd_atomic=*/4);
  options.local.max_send_wr = kAtomics;
  with_connected_pair(options, [&](Endpoint& local, RemoteEndpoint& remote,
                                   const EndpointInfo&) {
    ASSERT_EQ(0, remote.write_word(0, kInitial)) << remote.why();
    const uint64_t dropped_before = received_frames_dropped();
    std::string reply;
    ASSERT_EQ(0, soft_control("fault set seed=5; drop:dir=rx,op=ATOMIC_ACKNOWLEDGE,p=0.33", reply))
        << reply;
    for (uint64_t i = 0; i < kAtomics; ++i) {
      local.write_word(8 * i, 0);
      ASSERT_EQ(0, local.post_send(fetch_add(1 + i, 0, 1, 8 * i)));
    }
    std::vector<ibv_wc> done;
    ASSERT_EQ(0, local.poll(Queue::kSend, kAtomics, done)) << "got " << done.size();
    for (uint64_t i = 0; i < kAtomics; ++i) {
      expect_completion(done[i], 1 + i, IBV_WC_SUCCESS, "FETCH_AND_ADD " + std::to_string(i));
      EXPECT_EQ(kInitial + i, local.read_word(8 * i)) << "FETCH_AND_ADD " << i;
    }
    EXPECT_EQ(kInitial + kAtomics, remote_word(remote, 0));
    EXPECT_LT(0u, received_frames_dropped() - dropped_before)
        << "no acknowledge was dropped, so this tested no replay";
  });
}

// Atomics one at a time, then a SEND: on an HCA the peer's CPU takes no
// part, and its responder expects the SEND's PSN after the atomics'.
// softverbs executes an atomic from the initiator where the peer's word is
// mapped here (its MR pages shared: the default between processes of one
// host), and its counters say so.
TEST(Atomics, AtomicsOneAtATimeThenASendKeepThePeersResponderInSequence) {
  if (!device_has_atomics()) GTEST_SKIP() << "the device reports atomic_cap NONE";
  constexpr uint64_t kRounds = 50;
  with_connected_pair(atomic_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo& info) {
    ASSERT_EQ(0, remote.write_word(0, 7)) << remote.why();
    for (uint64_t i = 0; i < kRounds; ++i) {
      ASSERT_EQ(7 + 3 * i, run_atomic(local, fetch_add(2 * i + 1, 0, 3, 0), IBV_WC_FETCH_ADD));
      const uint64_t now = 7 + 3 * (i + 1);
      ASSERT_EQ(now, run_atomic(local, compare_swap(2 * i + 2, 0, now + 1, 0, 8),
                                IBV_WC_COMP_SWAP))
          << "an unequal compare";
    }
    EXPECT_EQ(7 + 3 * kRounds, remote_word(remote, 0));

    ASSERT_EQ(0, remote.post_recv(RecvSpec{9, 4096, 64})) << remote.why();
    SendSpec send;
    send.wr_id = 1000;
    send.length = 64;
    ASSERT_EQ(0, local.post_send(send));
    std::vector<ibv_wc> received;
    ASSERT_EQ(0, remote.poll(Queue::kRecv, 1, received)) << remote.why();
    expect_completion(received[0], 9, IBV_WC_SUCCESS, "the SEND at the peer");
    std::vector<ibv_wc> done;
    ASSERT_EQ(0, local.poll(Queue::kSend, 1, done));
    expect_completion(done[0], 1000, IBV_WC_SUCCESS, "the SEND");

    if (!soft_control_available() || peer_is_remote()) return;
    const bool direct = direct_execution_on() && mr_pages_shared();
    std::string stats;
    ASSERT_EQ(0, soft_control("stats", stats));
    EXPECT_EQ(direct ? 2 * kRounds : 0,
              qp_counter(stats, local.qp()->qp_num, "direct_operations").value_or(1))
        << stats;
    std::string remote_stats;
    ASSERT_EQ(0, remote.control("stats", remote_stats)) << remote.why();
    EXPECT_EQ(0u, qp_counter(remote_stats, info.qp.qpn, "sequence_naks_sent").value_or(1))
        << remote_stats;
  });
}

// The peer's own CPU adds to the word with atomic instructions while this
// side's FETCH_AND_ADDs change it too: no add of either is lost, and this
// side's adds see each other in order. IBV_ATOMIC_HCA promises atomicity
// only among the adapter's atomics; softverbs' are the processor's
// instructions on the word itself, whichever way they travel, so it
// promises this too (as IBV_ATOMIC_GLOB would).
TEST(Atomics, FetchAddsAreAtomicAgainstThePeersOwnCpu) {
  if (!device_has_atomics()) GTEST_SKIP() << "the device reports atomic_cap NONE";
  Errno err = 0;
  ContextPtr context = open_test_device(err);
  ibv_device_attr attr{};
  ASSERT_TRUE(context && ibv_query_device(context.get(), &attr) == 0) << err;
  if (attr.atomic_cap != IBV_ATOMIC_GLOB && !soft_control_available())
    GTEST_SKIP() << "atomic_cap is IBV_ATOMIC_HCA: atomic only among the adapter's atomics";
  constexpr uint64_t kCpuAdds = 5'000'000;  // below 2^32: the word's low half
  constexpr uint64_t kMinimumAdds = 200;
  with_connected_pair(atomic_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                            const EndpointInfo&) {
    ASSERT_EQ(0, remote.write_word(0, 0)) << remote.why();
    std::atomic<bool> cpu_done{false};
    Errno cpu_err = 0;
    std::thread cpu([&] {
      cpu_err = remote.add_to_word(0, kCpuAdds);
      cpu_done = true;
    });
    uint64_t adds = 0;
    bool ordered = true;
    while (!cpu_done || adds < kMinimumAdds) {
      const uint64_t original =
          run_atomic(local, fetch_add(adds + 1, 0, 1ull << 32, 0), IBV_WC_FETCH_ADD);
      ordered = ordered && (original >> 32) == adds;
      ++adds;
      if (::testing::Test::HasFatalFailure() || ::testing::Test::HasFailure()) break;
    }
    cpu.join();
    ASSERT_EQ(0, cpu_err) << remote.why();
    EXPECT_TRUE(ordered) << "a FETCH_AND_ADD saw another count of the earlier ones";
    EXPECT_EQ((adds << 32) + kCpuAdds, remote_word(remote, 0))
        << adds << " FETCH_AND_ADDs beside " << kCpuAdds << " adds of the peer's CPU";
  });
}

}  // namespace
}  // namespace softverbs::conformance
