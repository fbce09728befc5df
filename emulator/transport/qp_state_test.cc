#include "emulator/transport/qp_state.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace softverbs {
namespace {

constexpr uint32_t kInitMask = kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags;
constexpr uint32_t kRcRtrMask = kQpAttrState | kQpAttrAv | kQpAttrPathMtu | kQpAttrDestQpn |
                                kQpAttrRqPsn | kQpAttrMaxDestRdAtomic | kQpAttrMinRnrTimer;
constexpr uint32_t kRcRtsMask = kQpAttrState | kQpAttrSqPsn | kQpAttrTimeout |
                                kQpAttrRetryCnt | kQpAttrRnrRetry | kQpAttrMaxQpRdAtomic;

// IBTA 10.3.1: the RC path RESET -> INIT -> RTR -> RTS with exactly the
// required attributes is legal.
TEST(QpStateTable, RcForwardPathWithRequiredAttributes) {
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kReset, kInitMask, QpState::kInit), 0);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kInit, kRcRtrMask, QpState::kRtr), 0);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kRtr, kRcRtsMask, QpState::kRts), 0);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kRts, kQpAttrState, QpState::kSqd), 0);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kSqd, kQpAttrState, QpState::kRts), 0);
}

// Each required attribute missing makes the transition illegal.
TEST(QpStateTable, EveryRequiredAttributeIsRequired) {
  for (uint32_t bit = 1; bit; bit <<= 1) {
    if (!(kRcRtrMask & bit) || bit == kQpAttrState) continue;
    EXPECT_EQ(check_transition(QpType::kRc, QpState::kInit, kRcRtrMask & ~bit, QpState::kRtr),
              EINVAL) << "INIT->RTR without bit " << bit;
  }
  for (uint32_t bit = 1; bit; bit <<= 1) {
    if (!(kRcRtsMask & bit) || bit == kQpAttrState) continue;
    EXPECT_EQ(check_transition(QpType::kRc, QpState::kRtr, kRcRtsMask & ~bit, QpState::kRts),
              EINVAL) << "RTR->RTS without bit " << bit;
  }
  for (uint32_t bit = 1; bit; bit <<= 1) {
    if (!(kInitMask & bit) || bit == kQpAttrState) continue;
    EXPECT_EQ(check_transition(QpType::kRc, QpState::kReset, kInitMask & ~bit, QpState::kInit),
              EINVAL);
  }
}

// An attribute neither required nor optional for the transition is refused.
TEST(QpStateTable, AttributesOutsideTheTransitionAreRefused) {
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kReset, kInitMask | kQpAttrSqPsn, QpState::kInit),
            EINVAL);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kInit, kRcRtrMask | kQpAttrSqPsn, QpState::kRtr),
            EINVAL);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kRtr, kRcRtsMask | kQpAttrDestQpn, QpState::kRts),
            EINVAL);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kRtr, kRcRtsMask | kQpAttrMinRnrTimer,
                             QpState::kRts), 0);  // optional there
}

// The current state is an attribute only of the transitions into RTS from
// RTR, RTS, SQD and SQE (IBTA 11.2.5.2): every other transition refuses it.
TEST(QpStateTable, CurrentStateOnlyOnTheWayIntoRts) {
  constexpr QpState all[] = {QpState::kReset, QpState::kInit, QpState::kRtr, QpState::kRts,
                             QpState::kSqd,   QpState::kSqe,  QpState::kErr};
  for (QpType type : {QpType::kRc, QpType::kUc, QpType::kUd, QpType::kXrcSend}) {
    for (QpState cur : all) {
      for (QpState next : all) {
        const TransitionRule rule = transition_rule(type, cur, next);
        if (!rule.valid) continue;
        const bool allowed = next == QpState::kRts && cur != QpState::kInit;
        EXPECT_EQ(allowed, (rule.optional & kQpAttrCurState) != 0)
            << to_string(type) << " " << to_string(cur) << "->" << to_string(next);
      }
    }
  }
}

TEST(QpStateTable, SkippingStatesIsIllegal) {
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kReset, kRcRtrMask, QpState::kRtr), EINVAL);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kInit, kRcRtsMask, QpState::kRts), EINVAL);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kReset, kQpAttrState, QpState::kRts), EINVAL);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kErr, kQpAttrState, QpState::kRts), EINVAL);
  // RC never uses SQE (IBTA 10.3.1.6): SQE -> RTS exists only for UC/UD.
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kSqe, kQpAttrState, QpState::kRts), EINVAL);
  EXPECT_EQ(check_transition(QpType::kUc, QpState::kSqe, kQpAttrState, QpState::kRts), 0);
}

TEST(QpStateTable, AnyStateToResetAndError) {
  for (int s = 0; s <= static_cast<int>(QpState::kErr); ++s) {
    auto from = static_cast<QpState>(s);
    EXPECT_EQ(check_transition(QpType::kRc, from, kQpAttrState, QpState::kReset), 0);
    EXPECT_EQ(check_transition(QpType::kRc, from, kQpAttrState, QpState::kErr), 0);
    EXPECT_EQ(check_transition(QpType::kRc, from, kQpAttrState | kQpAttrSqPsn, QpState::kErr),
              EINVAL);
  }
}

TEST(QpStateTable, UdRequiresQkeyNotAccessFlags) {
  constexpr uint32_t ud_init = kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey;
  EXPECT_EQ(check_transition(QpType::kUd, QpState::kReset, ud_init, QpState::kInit), 0);
  EXPECT_EQ(check_transition(QpType::kUd, QpState::kReset, kInitMask, QpState::kInit), EINVAL);
  EXPECT_EQ(check_transition(QpType::kUd, QpState::kInit, kQpAttrState, QpState::kRtr), 0);
}

TEST(QpStateTable, ModifyWithoutStateStaysAndUsesTheSameRow) {
  // RTS -> RTS may change min_rnr_timer on RC but not the path MTU.
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kRts, kQpAttrMinRnrTimer, QpState::kReset), 0);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kRts, kQpAttrPathMtu, QpState::kReset), EINVAL);
  EXPECT_EQ(check_transition(QpType::kRc, QpState::kInit, kQpAttrAccessFlags, QpState::kReset), 0);
}

}  // namespace
}  // namespace softverbs
