// Data integrity of RC transfers between two processes (separate address
// spaces, endpoint information exchanged over a socket): SEND,
// SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM and RDMA_READ.
//
// Checked per ibv_post_send(3), ibv_post_recv(3), ibv_poll_cq(3) and the
// IBTA RC rules: every byte arrives where the scatter list (or the remote
// address) says and nowhere else; a message may be gathered from and
// scattered to many SGEs; a zero-length message is legal; completions
// carry the posted wr_id, the right opcode, byte_len, imm_data and qp_num;
// an unsignaled WR produces no completion and the completion of a later
// signaled WR implies it is done (completions are in order); inline data
// is copied at post time, so its buffer needs no MR and may change at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "conformance/transfer_session.h"
#include "harness/testsupport/forked_peer.h"
#include "harness/testsupport/remote_peer.h"

namespace softverbs::conformance {
namespace {

using testsupport::PeerChannel;
using testsupport::PeerOutcome;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
// Batches of unsignaled WRs only up to this size: beyond, they would only
// repeat the big-message check at several times the cost.
constexpr uint64_t kLargestBatchedLength = 1 * kMiB;

uint64_t seed_for(Operation op, uint64_t length, uint32_t index) {
  return (uint64_t{static_cast<uint32_t>(op)} << 48) ^ (length << 8) ^ index;
}

// Sizes around the edges that matter: empty, one byte, a page and its
// neighbours (also the largest path MTU), odd lengths, many MTUs, 16 MiB.
const uint64_t kSizes[] = {0,    1,    13,        4095,      4096,         4097,
                           12345, 64 * kKiB, 1 * kMiB, 1 * kMiB + 3, 16 * kMiB};

std::vector<TransferCase> plan_for_size(Operation op, uint64_t length,
                                        const RequesterLimits& limits, std::string& skip) {
  if (length > limits.max_msg_size) {
    skip = "message of " + std::to_string(length) + " bytes exceeds the port's max_msg_sz";
    return {};
  }
  uint32_t max_local = limits.granted.max_send_sge;
  if (op == Operation::kRdmaRead)
    max_local = std::min<uint32_t>(max_local, static_cast<uint32_t>(limits.device.max_sge_rd));
  max_local = std::max<uint32_t>(max_local, 1);
  const uint32_t max_recv = std::max<uint32_t>(limits.peer_max_recv_sge, 1);
  auto at_most_length = [&](uint32_t sges) {
    return static_cast<uint32_t>(std::min<uint64_t>(sges, length));
  };

  // (local SGEs, receive SGEs): one SGE each way, a gather onto fewer
  // receive SGEs, a scatter onto more, and the widest lists on both sides.
  std::set<std::pair<uint32_t, uint32_t>> shapes;
  if (length == 0) {
    shapes.insert({0, 1});
  } else {
    shapes.insert({1, 1});
    shapes.insert({1, std::min<uint32_t>(3, max_recv)});
    shapes.insert({at_most_length(std::min<uint32_t>(2, max_local)), 1});
    shapes.insert({at_most_length(max_local), max_recv});
  }
  // Only SENDs have a receive scatter list; other shapes differ in nothing.
  const bool scatters = op == Operation::kSend || op == Operation::kSendWithImm;
  if (!scatters) {
    std::set<std::pair<uint32_t, uint32_t>> local_only;
    for (const auto& shape : shapes) local_only.insert({shape.first, 1});
    shapes = local_only;
  }
  std::vector<TransferCase> cases;
  for (const auto& [local, recv] : shapes) {
    TransferCase c;
    c.index = static_cast<uint32_t>(cases.size());
    c.local_sges = local;
    c.recv_sges = recv;
    c.length = length;
    c.seed = seed_for(op, length, c.index);
    cases.push_back(c);
  }
  if (length <= kLargestBatchedLength) {
    TransferCase c;
    c.index = static_cast<uint32_t>(cases.size());
    c.batch = kMaxBatch;
    c.local_sges = at_most_length(std::min<uint32_t>(3, max_local));
    c.recv_sges = std::min<uint32_t>(2, max_recv);
    c.length = length;
    c.seed = seed_for(op, length, c.index);
    cases.push_back(c);
  }
  return cases;
}

std::vector<TransferCase> inline_plan(Operation op, const RequesterLimits& limits,
                                      std::string& skip) {
  const uint32_t max_inline = limits.granted.max_inline_data;
  if (max_inline == 0) {
    skip = "the device grants no inline data";
    return {};
  }
  std::vector<TransferCase> cases;
  auto add = [&](uint64_t length, uint32_t sges, uint32_t batch) {
    TransferCase c;
    c.index = static_cast<uint32_t>(cases.size());
    c.batch = batch;
    c.local_sges = static_cast<uint32_t>(std::min<uint64_t>(sges, length));
    c.recv_sges = std::min<uint32_t>(2, std::max<uint32_t>(limits.peer_max_recv_sge, 1));
    c.inline_data = 1;
    c.length = length;
    c.seed = seed_for(op, length, c.index) ^ 0x1111;
    cases.push_back(c);
  };
  const uint32_t max_sges = std::min<uint32_t>(2, limits.granted.max_send_sge);
  for (uint64_t length : {uint64_t{1}, uint64_t{max_inline / 2 + 1}, uint64_t{max_inline}}) {
    add(length, 1, 1);
    if (max_sges >= 2 && length >= 2) add(length, 2, 1);
  }
  add(max_inline, max_sges, kMaxBatch);
  return cases;
}

PeerOutcome transfer_responder(PeerChannel& channel, uint32_t op) {
  return run_responder(channel, static_cast<Operation>(op));
}
[[maybe_unused]] const bool kTransferResponderRegistered =
    testsupport::register_peer_service("transfer-responder", transfer_responder);

// Runs one session: the requester here, the responder in the peer process.
void run_session(Operation op, bool inline_data, const PlanMaker& plan) {
  std::string skip_reason;
  PeerOutcome child = testsupport::run_with_peer_service(
      "transfer-responder", static_cast<uint32_t>(op), [&](PeerChannel& channel) {
        run_requester(channel, op, inline_data, plan, skip_reason);
      });
  EXPECT_TRUE(child.passed) << "responder process: " << child.message;
  if (!skip_reason.empty() && !::testing::Test::HasFailure()) GTEST_SKIP() << skip_reason;
}

struct TransferParam {
  Operation op;
  uint64_t length;
};

void PrintTo(const TransferParam& param, std::ostream* out) {
  *out << operation_name(param.op) << " of " << param.length << " bytes";
}

class DataTransfer : public ::testing::TestWithParam<TransferParam> {};

// Every operation, every size, over one to max_sge SGEs on either side,
// signaled and as unsignaled batches.
TEST_P(DataTransfer, EveryByteArrivesAndCompletionsDescribeTheTransfer) {
  const TransferParam param = GetParam();
  run_session(param.op, false, [param](const RequesterLimits& limits, std::string& skip) {
    return plan_for_size(param.op, param.length, limits, skip);
  });
}

std::vector<TransferParam> all_transfers() {
  std::vector<TransferParam> params;
  for (Operation op : {Operation::kSend, Operation::kSendWithImm, Operation::kRdmaWrite,
                       Operation::kRdmaWriteWithImm, Operation::kRdmaRead}) {
    for (uint64_t length : kSizes) params.push_back({op, length});
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(OperationsAndSizes, DataTransfer, ::testing::ValuesIn(all_transfers()),
                         [](const auto& info) {
                           return std::string(operation_name(info.param.op)) + "_" +
                                  std::to_string(info.param.length);
                         });

class InlineTransfer : public ::testing::TestWithParam<Operation> {};

// IBV_SEND_INLINE (SEND and RDMA WRITE only) up to the QP's granted
// max_inline_data: the source is unregistered memory (the L_Key is not
// checked) and is overwritten as soon as ibv_post_send returns.
TEST_P(InlineTransfer, InlineDataUpToMaxInlineArrivesIntact) {
  const Operation op = GetParam();
  run_session(op, true, [op](const RequesterLimits& limits, std::string& skip) {
    return inline_plan(op, limits, skip);
  });
}

INSTANTIATE_TEST_SUITE_P(InlineOperations, InlineTransfer,
                         ::testing::Values(Operation::kSend, Operation::kSendWithImm,
                                           Operation::kRdmaWrite, Operation::kRdmaWriteWithImm),
                         [](const auto& info) { return std::string(operation_name(info.param)); });

}  // namespace
}  // namespace softverbs::conformance
