// Integrity soak (suite `Soak`, filter it in or out by name): 1 GiB of RC
// traffic between two processes in messages of 1 B to 1 MiB, SEND, RDMA
// WRITE, RDMA READ and atomics mixed, while both processes' wires drop,
// duplicate, reorder and corrupt packets. The RC guarantee under test
// (IBTA 9.7.1, 9.7.5, 9.7.6; DESIGN "what is never lost"): every message is
// delivered exactly once, in order and intact, every WR completes
// successfully exactly once and in the order posted, and every atomic takes
// effect once.
//
// SOFTVERBS_SOAK_BYTES (default 1 GiB) and SOFTVERBS_SOAK_SEED (default 1)
// change the run; the same seed replays the same traffic and fault plan.
// SOFTVERBS_SOAK_FAULTS replaces the fault rules (docs: the fault plan
// syntax), to narrow a failure down to one kind of fault, and
// SOFTVERBS_SOAK_TIMEOUT the QPs' local ACK timeout exponent (default 11).
//
// The same traffic with the peer killed part way through
// (SOFTVERBS_SOAK_KILL_AFTER bytes) ends the survivor's next WRs in
// IBV_WC_RETRY_EXC_ERR after exactly its retry budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "conformance/peer_pair.h"
#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kMaxMessage = kMiB;
// WRs posted per round; each owns one 1 MiB slot on both sides.
constexpr uint32_t kSlots = 16;
constexpr uint64_t kWordsOffset = kSlots * kMiB;  // atomic words / atomic results
constexpr uint64_t kCounterOffset = kWordsOffset;       // FETCH_AND_ADD target
constexpr uint64_t kSwapWordOffset = kWordsOffset + 8;  // CMP_AND_SWP target
constexpr uint8_t kSoakRetryCnt = 7;

enum class Op { kSend, kWrite, kRead, kFetchAdd, kCompareSwap };

const char* op_name(Op op) {
  switch (op) {
    case Op::kSend: return "SEND";
    case Op::kWrite: return "RDMA_WRITE";
    case Op::kRead: return "RDMA_READ";
    case Op::kFetchAdd: return "FETCH_AND_ADD";
    case Op::kCompareSwap: return "CMP_AND_SWP";
  }
  return "?";
}

ibv_wc_opcode completion_opcode(Op op) {
  switch (op) {
    case Op::kSend: return IBV_WC_SEND;
    case Op::kWrite: return IBV_WC_RDMA_WRITE;
    case Op::kRead: return IBV_WC_RDMA_READ;
    case Op::kFetchAdd: return IBV_WC_FETCH_ADD;
    case Op::kCompareSwap: return IBV_WC_COMP_SWAP;
  }
  return IBV_WC_SEND;
}

struct Message {
  Op op = Op::kSend;
  uint64_t wr_id = 0;
  uint32_t length = 0;  // data operations
  uint64_t seed = 0;
  uint64_t operand = 0;  // FETCH_AND_ADD: the addend; CMP_AND_SWP: the swap value
  bool compare_matches = true;  // CMP_AND_SWP: compare with the current value?
};

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  return std::strtoull(text, nullptr, 0);
}

// The QPs' local ACK timeout exponent: SOFTVERBS_SOAK_TIMEOUT, by default
// 11 (8.4 ms).
uint8_t soak_timeout() { return static_cast<uint8_t>(env_or("SOFTVERBS_SOAK_TIMEOUT", 11)); }

// The traffic: a reproducible stream of messages. Lengths are log-uniform
// over 1 B .. 1 MiB, so tiny and huge messages are both common; the first
// messages pin the extremes for every data operation.
class TrafficPlan {
 public:
  explicit TrafficPlan(uint64_t seed) : random_(seed) {}

  Message next() {
    Message m;
    m.wr_id = ++issued_;
    m.seed = random_();
    if (issued_ <= 6) {
      m.op = static_cast<Op>((issued_ - 1) % 3);
      m.length = issued_ <= 3 ? 1 : kMaxMessage;
      return m;
    }
    const uint32_t pick = random_() % 100;
    if (pick < 30) m.op = Op::kSend;
    else if (pick < 60) m.op = Op::kWrite;
    else if (pick < 90) m.op = Op::kRead;
    else if (pick < 95) m.op = Op::kFetchAdd;
    else m.op = Op::kCompareSwap;
    std::uniform_real_distribution<double> exponent(0.0, 20.0);
    m.length = static_cast<uint32_t>(
        std::clamp<double>(std::exp2(exponent(random_)), 1.0, double(kMaxMessage)));
    m.operand = random_();
    m.compare_matches = random_() % 4 != 0;
    return m;
  }

 private:
  std::mt19937_64 random_;
  uint64_t issued_ = 0;
};

bool is_data(Op op) { return op == Op::kSend || op == Op::kWrite || op == Op::kRead; }

struct SoakTotals {
  uint64_t bytes = 0;
  uint64_t wrs = 0;
  uint64_t rounds = 0;
  uint64_t per_op[5] = {};
};

class SoakRun {
 public:
  SoakRun(Endpoint& local, RemoteEndpoint& remote, uint64_t seed, uint64_t total_bytes)
      : local_(local), remote_(remote), plan_(seed), total_bytes_(total_bytes) {}

  void run() {
    uint64_t counter = 0x1000;
    uint64_t swap_word = 0;
    ASSERT_EQ(0, remote_.write_word(kCounterOffset, counter)) << remote_.why();
    ASSERT_EQ(0, remote_.write_word(kSwapWordOffset, swap_word)) << remote_.why();
    counter_ = counter;
    swap_word_ = swap_word;
    while (totals_.bytes < total_bytes_) {
      ASSERT_NO_FATAL_FAILURE(run_round());
      if (::testing::Test::HasFailure()) return;
    }
    std::vector<ibv_wc> extra;
    ASSERT_EQ(0, local_.poll(Queue::kSend, 0, extra));
    EXPECT_TRUE(extra.empty()) << "a WR completed twice: " << describe_completion(extra[0]);
    ASSERT_EQ(0, remote_.poll(Queue::kRecv, 0, extra)) << remote_.why();
    EXPECT_TRUE(extra.empty()) << "a message was received twice: "
                               << describe_completion(extra[0]);
    uint64_t value = 0;
    ASSERT_EQ(0, remote_.read_word(kCounterOffset, value)) << remote_.why();
    EXPECT_EQ(counter_, value) << "the FETCH_AND_ADD target";
    ASSERT_EQ(0, remote_.read_word(kSwapWordOffset, value)) << remote_.why();
    EXPECT_EQ(swap_word_, value) << "the CMP_AND_SWP target";
  }

  const SoakTotals& totals() const { return totals_; }

 private:
  void run_round() {
    std::vector<Message> round;
    while (round.size() < kSlots && totals_.bytes < total_bytes_) {
      round.push_back(plan_.next());
      if (is_data(round.back().op)) totals_.bytes += round.back().length;
    }
    // Prepare both sides: sources filled, targets cleared, receives posted.
    uint32_t sends = 0;
    for (size_t slot = 0; slot < round.size(); ++slot) {
      const Message& m = round[slot];
      const uint64_t at = slot * kMiB;
      switch (m.op) {
        case Op::kSend:
          local_.fill(at, m.length, m.seed);
          ASSERT_EQ(0, remote_.post_recv({m.wr_id, at, static_cast<uint32_t>(kMiB)}))
              << remote_.why();
          ++sends;
          break;
        case Op::kWrite:
          local_.fill(at, m.length, m.seed);
          ASSERT_EQ(0, remote_.fill_constant(at, m.length, 0)) << remote_.why();
          break;
        case Op::kRead:
          local_.fill_constant(at, m.length, 0);
          ASSERT_EQ(0, remote_.fill(at, m.length, m.seed)) << remote_.why();
          break;
        case Op::kFetchAdd:
        case Op::kCompareSwap:
          local_.write_word(kWordsOffset + 8 * slot, 0);
          break;
      }
    }
    // Post the round, all signaled: each WR must complete exactly once.
    uint64_t counter = counter_, swap_word = swap_word_;
    std::vector<uint64_t> expected_original(round.size(), 0);
    for (size_t slot = 0; slot < round.size(); ++slot) {
      const Message& m = round[slot];
      SendSpec spec;
      spec.wr_id = m.wr_id;
      spec.length = m.length;
      spec.local_offset = slot * kMiB;
      spec.remote_offset = slot * kMiB;
      switch (m.op) {
        case Op::kSend: spec.opcode = IBV_WR_SEND; break;
        case Op::kWrite: spec.opcode = IBV_WR_RDMA_WRITE; break;
        case Op::kRead: spec.opcode = IBV_WR_RDMA_READ; break;
        case Op::kFetchAdd:
          spec.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
          spec.remote_offset = kCounterOffset;
          spec.local_offset = kWordsOffset + 8 * slot;
          spec.compare_add = m.operand;
          expected_original[slot] = counter;
          counter += m.operand;
          break;
        case Op::kCompareSwap:
          spec.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
          spec.remote_offset = kSwapWordOffset;
          spec.local_offset = kWordsOffset + 8 * slot;
          spec.compare_add = m.compare_matches ? swap_word : ~swap_word;
          spec.swap = m.operand;
          expected_original[slot] = swap_word;
          if (m.compare_matches) swap_word = m.operand;
          break;
      }
      ASSERT_EQ(0, local_.post_send(spec)) << "post WR " << m.wr_id;
    }

    std::vector<ibv_wc> done;
    Errno err = local_.poll(Queue::kSend, round.size(), done);
    for (size_t i = 0; i < done.size(); ++i) {
      const Message& m = round[i];
      ASSERT_EQ(IBV_WC_SUCCESS, done[i].status)
          << op_name(m.op) << " of " << m.length << " B: " << describe_completion(done[i]);
      ASSERT_EQ(m.wr_id, done[i].wr_id) << "completion out of order: " << describe_completion(done[i]);
      EXPECT_EQ(completion_opcode(m.op), done[i].opcode) << describe_completion(done[i]);
    }
    ASSERT_EQ(0, err) << "round " << totals_.rounds << ": " << done.size() << " of "
                      << round.size() << " WRs completed, next is WR " << round[done.size()].wr_id
                      << " (" << op_name(round[done.size()].op) << " of "
                      << round[done.size()].length << " B)";

    // Verify where each message landed.
    std::vector<ibv_wc> received;
    if (sends) {
      ASSERT_EQ(0, remote_.poll(Queue::kRecv, sends, received))
          << remote_.why() << "; " << received.size() << " of " << sends << " SENDs received";
    }
    size_t next_receive = 0;
    for (size_t slot = 0; slot < round.size(); ++slot) {
      const Message& m = round[slot];
      const uint64_t at = slot * kMiB;
      std::optional<ByteMismatch> wrong;
      switch (m.op) {
        case Op::kSend: {
          const ibv_wc& wc = received[next_receive++];
          ASSERT_EQ(IBV_WC_SUCCESS, wc.status) << describe_completion(wc);
          ASSERT_EQ(m.wr_id, wc.wr_id) << "receive out of order: " << describe_completion(wc);
          ASSERT_EQ(m.length, wc.byte_len) << describe_completion(wc);
          ASSERT_EQ(0, remote_.check(at, m.length, m.seed, wrong)) << remote_.why();
          break;
        }
        case Op::kWrite:
          ASSERT_EQ(0, remote_.check(at, m.length, m.seed, wrong)) << remote_.why();
          break;
        case Op::kRead: wrong = local_.check(at, m.length, m.seed); break;
        case Op::kFetchAdd:
        case Op::kCompareSwap:
          ASSERT_EQ(expected_original[slot], local_.read_word(kWordsOffset + 8 * slot))
              << op_name(m.op) << " WR " << m.wr_id << " returned the wrong original value";
          break;
      }
      ASSERT_FALSE(wrong) << op_name(m.op) << " WR " << m.wr_id << " of " << m.length
                          << " B: " << describe_mismatch(*wrong);
      ++totals_.per_op[static_cast<int>(m.op)];
    }
    counter_ = counter;
    swap_word_ = swap_word;
    totals_.wrs += round.size();
    ++totals_.rounds;
  }

  Endpoint& local_;
  RemoteEndpoint& remote_;
  TrafficPlan plan_;
  const uint64_t total_bytes_;
  uint64_t counter_ = 0;
  uint64_t swap_word_ = 0;
  SoakTotals totals_;
};

std::string fault_plan(uint64_t seed) {
  const char* rules = std::getenv("SOFTVERBS_SOAK_FAULTS");
  if (!rules || !*rules) rules = "drop:p=0.05; dup:p=0.01; reorder:p=0.05,depth=3; corrupt:p=0.001";
  return "seed=" + std::to_string(seed) + "; " + rules;
}

// The lines of a `stats` reply worth reading after a soak: faults, engine
// and the QP totals (not every QP of the process).
std::string stats_summary(const std::string& stats) {
  std::string out;
  size_t begin = 0;
  while (begin < stats.size()) {
    size_t end = stats.find('\n', begin);
    if (end == std::string::npos) end = stats.size();
    const std::string line = stats.substr(begin, end - begin);
    if (line.rfind("faults", 0) == 0 || line.rfind("engine", 0) == 0 ||
        line.rfind("device", 0) == 0 || line.rfind("fault plan", 0) == 0)
      out += "    " + line + "\n";
    begin = end + 1;
  }
  return out;
}

// Two processes with a 1 MiB slot per WR on both sides, and the QP
// attributes the soak runs with.
PairOptions soak_pair_options() {
  constexpr int kAtomicAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  RcParameters params;
  params.access = kAtomicAccess;
  params.timeout = soak_timeout();
  params.retry_cnt = kSoakRetryCnt;
  params.rnr_retry = 7;
  params.min_rnr_timer = 1;
  params.max_rd_atomic = 4;
  params.max_dest_rd_atomic = 4;
  PairOptions options = symmetric_options(params);
  for (EndpointConfig* config : {&options.local, &options.remote}) {
    config->buffer_length = kSlots * kMiB + 4096;
    config->buffer_access = kAtomicAccess;
    config->max_send_wr = kSlots;
    config->max_recv_wr = kSlots;
    config->cq_depth = 4 * kSlots;
  }
  options.deadline = std::chrono::seconds(900);
  return options;
}

// The run's seed (softverbs run --seed N) when there is one, printed with
// the command that asks for the same run again.
uint64_t soak_seed() {
  const uint64_t seed = env_or("SOFTVERBS_FAULT_SEED", env_or("SOFTVERBS_SOAK_SEED", 1));
  std::printf("  soak fault seed %llu (replay with: softverbs run --seed %llu -- "
              "conformance_tests --gtest_filter=Soak.*)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  return seed;
}

// A counter of the test's device in a `stats` reply (its totals line), or
// 0 when it is not there.
uint64_t device_counter(const std::string& stats, const std::string& name) {
  const size_t device = stats.find("\ndevice " + test_config().device_name + " ");
  if (device == std::string::npos) return 0;
  const size_t line_end = stats.find('\n', device + 1);
  const size_t at = stats.find(" " + name + "=", device);
  if (at == std::string::npos || at > line_end) return 0;
  return std::strtoull(stats.c_str() + at + name.size() + 2, nullptr, 10);
}

// 1 GiB (SOFTVERBS_SOAK_BYTES) of mixed RC traffic with
// "drop:p=0.05; dup:p=0.01; reorder:p=0.05,depth=3; corrupt:p=0.001" in both
// processes: every byte verified where it lands, every WR completes with
// IBV_WC_SUCCESS exactly once and in order (wr_ids checked), and the atomic
// words end where exactly-once execution puts them. A short local ACK
// timeout (timeout=11, 8.4 ms) with retry_cnt=7 lets it finish; running out
// of retries under this loss would itself be a failure worth reporting. On
// a starved machine (two cores, sanitizers, other tests) a timer can fire
// before the peer ever ran: the sanitizer builds use a longer one.
TEST(Soak, OneGibOfMixedRcTrafficUnderFaultsArrivesIntactExactlyOnceInOrder) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  const uint64_t seed = soak_seed();
  const uint64_t total_bytes = env_or("SOFTVERBS_SOAK_BYTES", 1ull << 30);
  SoftControlReset reset(test_config().device_name);

  with_connected_pair(soak_pair_options(), [&](Endpoint& local, RemoteEndpoint& remote,
                                   const EndpointInfo&) {
    std::string reply;
    ASSERT_EQ(0, soft_control("fault set " + fault_plan(seed), reply)) << reply;
    ASSERT_EQ(0, remote.control("fault set " + fault_plan(seed + 1), reply))
        << reply << remote.why();

    SoakRun soak(local, remote, seed, total_bytes);
    const auto start = std::chrono::steady_clock::now();
    soak.run();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    soft_control("fault clear");
    remote.control("fault clear", reply);

    std::string local_stats, remote_stats;
    soft_control("stats", local_stats);
    remote.control("stats", remote_stats);
    const SoakTotals& totals = soak.totals();
    std::printf(
        "  soak seed %llu: %.1f MiB in %llu WRs (%llu SEND, %llu WRITE, %llu READ, %llu FAA, "
        "%llu CAS), %llu rounds, %.1f s\n  requester process:\n%s  responder process:\n%s",
        static_cast<unsigned long long>(seed), double(totals.bytes) / kMiB,
        static_cast<unsigned long long>(totals.wrs),
        static_cast<unsigned long long>(totals.per_op[0]),
        static_cast<unsigned long long>(totals.per_op[1]),
        static_cast<unsigned long long>(totals.per_op[2]),
        static_cast<unsigned long long>(totals.per_op[3]),
        static_cast<unsigned long long>(totals.per_op[4]),
        static_cast<unsigned long long>(totals.rounds), seconds,
        stats_summary(local_stats).c_str(), stats_summary(remote_stats).c_str());
    if (::testing::Test::HasFailure()) {
      std::printf("  requester stats in full:\n%s\n  responder stats in full:\n%s\n",
                  local_stats.c_str(), remote_stats.c_str());
    }
  });
}

// The soak's traffic and faults with the peer killed (SIGKILL) after
// SOFTVERBS_SOAK_KILL_AFTER bytes (64 MiB): the WRITEs posted next end with
// IBV_WC_RETRY_EXC_ERR (the first) and IBV_WC_WR_FLUSH_ERR (the rest)
// after exactly the retry budget the QP was given, retry_cnt + 1 local ACK
// timeouts, none of them waited out: a dead peer is never taken for one
// that has not run yet, however busy the host (docs/faults.md, "Timers and
// a peer that has not run").
TEST(Soak, APeerKilledMidRunEndsTheSurvivorInRetryExcErrWithinItsBudget) {
  if (!soft_control_available()) GTEST_SKIP() << kNoSoftControl;
  const uint64_t seed = soak_seed();
  const uint64_t kill_after = env_or("SOFTVERBS_SOAK_KILL_AFTER", 64 * kMiB);
  SoftControlReset reset(test_config().device_name);

  const PeerOutcome peer = run_connected_pair(soak_pair_options(), [&](Endpoint& local,
                                                                       RemoteEndpoint& remote,
                                                                       const EndpointInfo& info) {
    std::string reply;
    ASSERT_EQ(0, soft_control("fault set " + fault_plan(seed), reply)) << reply;
    ASSERT_EQ(0, remote.control("fault set " + fault_plan(seed + 1), reply))
        << reply << remote.why();
    SoakRun soak(local, remote, seed, kill_after);
    soak.run();
    if (::testing::Test::HasFailure()) return;
    std::string before;
    ASSERT_EQ(0, soft_control("stats", before)) << before;

    ASSERT_NO_FATAL_FAILURE(kill_peer(remote, info));
    const auto killed_at = std::chrono::steady_clock::now();
    for (uint32_t slot = 0; slot < kSlots; ++slot) {
      SendSpec write;
      write.wr_id = 1'000'000 + slot;
      write.opcode = IBV_WR_RDMA_WRITE;
      write.local_offset = slot * kMiB;
      write.remote_offset = slot * kMiB;
      write.length = kMiB;
      ASSERT_EQ(0, local.post_send(write)) << "WRITE " << slot;
    }
    std::vector<ibv_wc> completions;
    ASSERT_EQ(0, local.poll(Queue::kSend, kSlots, completions))
        << "got " << completions.size() << " of " << kSlots << " completions";
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - killed_at);
    soft_control("fault clear");
    expect_completion(completions[0], 1'000'000, IBV_WC_RETRY_EXC_ERR,
                      "the first WRITE after the peer was killed");
    for (uint32_t i = 1; i < kSlots; ++i)
      expect_completion(completions[i], 1'000'000 + i, IBV_WC_WR_FLUSH_ERR, "a WRITE behind it");
    EXPECT_EQ(IBV_QPS_ERR, local.state()) << qp_state_name(local.state());
    // The budget, counted in timeouts rather than time: retry_cnt + 1 of
    // them spent, none waited out for a peer that is gone.
    std::string after;
    ASSERT_EQ(0, soft_control("stats", after)) << after;
    const uint64_t spent = device_counter(after, "retransmit_timeouts") -
                           device_counter(before, "retransmit_timeouts");
    const uint64_t waited = device_counter(after, "retransmit_timeouts_waited") -
                            device_counter(before, "retransmit_timeouts_waited");
    std::printf("  peer killed after %.1f MiB: RETRY_EXC_ERR after %llu timeouts (%lld ms), "
                "%llu waited out\n",
                double(soak.totals().bytes) / kMiB, static_cast<unsigned long long>(spent),
                static_cast<long long>(elapsed.count()), static_cast<unsigned long long>(waited));
    EXPECT_EQ(kSoakRetryCnt + 1u, spent) << "local ACK timeouts spent between the kill and the error";
    EXPECT_EQ(0u, waited) << "timeouts waited out for the dead peer as if it had not run yet";
  });
  EXPECT_FALSE(peer.passed);
}

}  // namespace
}  // namespace softverbs::conformance
