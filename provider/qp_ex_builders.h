// The ibv_wr_* work request builders of a soft QP's ibv_qp_ex
// (ibv_wr_post(3)).
#pragma once

#include <cstdint>

#include "provider/objects.h"

namespace softverbs::provider {

// Fills the builder pointers of qp.ibv_ex, which must have a
// send_wr_batch. The operations of `send_ops` (IBV_QP_EX_WITH_*, checked
// against the QP type by the caller) build WRs; every other operation,
// and the setters a soft QP has no use for (XRC SRQN), are present but make
// ibv_wr_complete fail with EOPNOTSUPP rather than crash the program.
void install_send_wr_builders(SoftQp& qp, uint64_t send_ops);

}  // namespace softverbs::provider
