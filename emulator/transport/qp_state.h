// The IBTA's QP state machine (IBTA 10.3.1, table "QP state transition
// attributes"): which transitions exist for each QP type, and which
// attributes each one requires and allows.
#pragma once

#include <cstdint>

#include "emulator/types.h"

namespace softverbs {

struct TransitionRule {
  bool valid = false;
  uint32_t required = 0;  // QpAttrMask bits besides kQpAttrState
  uint32_t optional = 0;
};

// The rule for cur -> next on a QP of `type`.
TransitionRule transition_rule(QpType type, QpState cur, QpState next);

// The attributes of `mask` that mean something to a QP of `type`. Each XRC
// half has no use for the other half's attributes, and the kernel drops
// them from a Modify QP before checking it (programs such as perftest pass
// the RC set to both); so does this.
uint32_t applicable_attributes(QpType type, uint32_t mask);

// Checks a Modify QP request against the table: 0 when legal, else EINVAL.
// `mask` without kQpAttrState means "stay in cur" (cur -> cur).
Errno check_transition(QpType type, QpState cur, uint32_t mask, QpState next);

}  // namespace softverbs
