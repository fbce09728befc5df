// The rules for the attributes of the extended create verbs: which
// comp_mask bits, flags and send ops a soft device honours, and the errno
// for those it cannot (ibv_create_qp_ex(3), ibv_create_cq_ex(3),
// ibv_modify_cq). Pure functions, unit-tested on their own.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "emulator/attributes.h"
#include "emulator/types.h"

namespace softverbs::provider {

// The ibv_wr_* operations (IBV_QP_EX_WITH_*) a soft QP of `type` can post.
uint64_t supported_send_ops(QpType type);

// Checks the ibv_qp_init_attr_ex fields beyond ibv_qp_init_attr's:
// EINVAL without IBV_QP_INIT_ATTR_PD (or with a NULL pd) or with an unknown
// comp_mask bit or create flag; EOPNOTSUPP for what a soft device cannot
// do (an XRC domain, create flags, TSO, RSS, an indirection table, XRC
// types, send ops the QP type lacks). A bit whose field holds its zero
// default is accepted. The QP type itself is checked by the creation.
Errno check_create_qp_ex(const ibv_qp_init_attr_ex& attr);

// The wc_flags a soft CQ can report (IBV_WC_EX_WITH_*).
constexpr uint64_t kSupportedWcFlags =
    uint64_t{IBV_WC_STANDARD_FLAGS} | uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP} |
    uint64_t{IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK};

// Checks an ibv_cq_init_attr_ex: EINVAL for cqe outside 1..max_cqe,
// comp_vector outside 0..num_comp_vectors-1, an unknown comp_mask bit or
// flag, or a parent domain (a soft context has none); EOPNOTSUPP for
// wc_flags beyond kSupportedWcFlags or IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN.
// On success `stamps` (CqStamps) says which times completions record.
Errno check_create_cq_ex(const ibv_cq_init_attr_ex& attr, uint32_t max_cqe,
                         int num_comp_vectors, uint32_t& stamps);

// ibv_modify_cq: EINVAL for an unknown attr_mask bit or moderation above
// the device's cq_mod_caps.
Errno check_modify_cq(const ibv_modify_cq_attr& attr, const DeviceAttributes& device);

}  // namespace softverbs::provider
