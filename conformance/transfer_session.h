// The two sides of a data-transfer test between two processes: the
// requester (the test process) posts SEND / RDMA WRITE / RDMA READ work
// requests, the responder (a forked child) posts receives, exposes its
// memory and checks what arrived. Every message's bytes come from
// data_pattern, split unevenly over SGEs with guard bytes around each piece,
// so a byte that is lost, misplaced, stale or written out of bounds fails
// the test.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "harness/testsupport/peer_channel.h"
#include "harness/testsupport/peer_outcome.h"

namespace softverbs::conformance {

enum class Operation : uint32_t { kSend, kSendWithImm, kRdmaWrite, kRdmaWriteWithImm, kRdmaRead };

const char* operation_name(Operation op);
inline void PrintTo(Operation op, std::ostream* out) { *out << operation_name(op); }

// Most WRs one case posts in one chain.
inline constexpr uint32_t kMaxBatch = 4;

// One round: `batch` WRs of `length` bytes each, posted as one chain; all
// but the last are unsignaled, so the last one's completion stands for all.
struct TransferCase {
  uint32_t index = 0;
  uint32_t batch = 1;
  uint32_t local_sges = 1;   // requester's gather list (its scatter list for READ)
  uint32_t recv_sges = 1;    // responder's scatter list for SENDs
  uint32_t inline_data = 0;  // IBV_SEND_INLINE from unregistered memory
  uint32_t last = 0;         // ends the session; carries no data
  uint64_t length = 0;
  uint64_t seed = 0;
};

// What the plan may depend on.
struct RequesterLimits {
  ibv_device_attr device{};
  ibv_qp_cap granted{};          // the requester QP's send-side caps
  uint32_t peer_max_recv_sge = 1;
  uint64_t max_msg_size = 0;
};

// Returns the cases to run, or none with `skip_reason` set.
using PlanMaker =
    std::function<std::vector<TransferCase>(const RequesterLimits&, std::string& skip_reason)>;

// The requester's side, in the test process; failures are gtest failures.
// `skip_reason` is set when the device cannot run the plan.
void run_requester(testsupport::PeerChannel& channel, Operation op, bool inline_data,
                   const PlanMaker& make_plan, std::string& skip_reason);

// The responder's side, in the forked child.
testsupport::PeerOutcome run_responder(testsupport::PeerChannel& channel, Operation op);

}  // namespace softverbs::conformance
