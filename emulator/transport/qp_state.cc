#include "emulator/transport/qp_state.h"

#include <cerrno>

namespace softverbs {
namespace {

constexpr int kStates = 7;
constexpr int kTypes = 5;

// Attributes the IBTA lets a connected QP change while running.
constexpr uint32_t kPathAttrs = kQpAttrAltPath | kQpAttrPathMigState;

struct Table {
  TransitionRule rule[kTypes][kStates][kStates];
};

constexpr int idx(QpType t) { return static_cast<int>(t); }
constexpr int idx(QpState s) { return static_cast<int>(s); }

// XRC (IBTA 10.3.1, with the kernel's table): each half is an RC QP without
// what it does not have. The initiator receives nothing, so no responder
// attributes at RTR; the target sends nothing, so no retry counts or
// initiator depth at RTS.
constexpr void add_xrc_rules(Table& t) {
  using S = QpState;
  const QpType ini = QpType::kXrcSend, tgt = QpType::kXrcRecv;
  auto copy_rc = [&t](QpType ty, QpState a, QpState b, uint32_t drop_req, uint32_t drop_opt) {
    TransitionRule r = t.rule[idx(QpType::kRc)][idx(a)][idx(b)];
    r.required &= ~drop_req;
    r.optional &= ~(drop_req | drop_opt);
    t.rule[idx(ty)][idx(a)][idx(b)] = r;
  };
  constexpr uint32_t kResponderOnly = kQpAttrMaxDestRdAtomic | kQpAttrMinRnrTimer;
  constexpr uint32_t kRequesterOnly = kQpAttrRetryCnt | kQpAttrRnrRetry | kQpAttrMaxQpRdAtomic;
  constexpr QpState all[] = {S::kReset, S::kInit, S::kRtr, S::kRts, S::kSqd, S::kSqe, S::kErr};
  for (QpState a : all) {
    for (QpState b : all) {
      if (a == S::kSqe || b == S::kSqe) continue;  // reliable QPs have no SQE
      copy_rc(ini, a, b, 0, 0);
      copy_rc(tgt, a, b, 0, 0);
    }
  }
  copy_rc(ini, S::kInit, S::kRtr, kResponderOnly, 0);
  copy_rc(ini, S::kRtr, S::kRts, 0, kQpAttrMinRnrTimer);
  copy_rc(tgt, S::kRtr, S::kRts, kRequesterOnly, 0);
  copy_rc(tgt, S::kSqd, S::kSqd, 0, kRequesterOnly);
}

constexpr Table build_table() {
  Table t{};
  constexpr QpState all[] = {QpState::kReset, QpState::kInit, QpState::kRtr,
                             QpState::kRts,   QpState::kSqd,  QpState::kSqe,
                             QpState::kErr};
  for (int ty = 0; ty < kTypes; ++ty) {
    // Every state may go to RESET and to ERR with the state alone.
    for (QpState s : all) {
      t.rule[ty][idx(s)][idx(QpState::kReset)] = {true, 0, 0};
      t.rule[ty][idx(s)][idx(QpState::kErr)] = {true, 0, 0};
    }
  }
  const QpType rc = QpType::kRc, uc = QpType::kUc, ud = QpType::kUd;
  auto set = [&t](QpType ty, QpState a, QpState b, uint32_t req, uint32_t opt) {
    t.rule[idx(ty)][idx(a)][idx(b)] = {true, req, opt};
  };
  using S = QpState;
  // RESET -> INIT
  set(rc, S::kReset, S::kInit, kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags, 0);
  set(uc, S::kReset, S::kInit, kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags, 0);
  set(ud, S::kReset, S::kInit, kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey, 0);
  // INIT -> INIT
  set(rc, S::kInit, S::kInit, 0, kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags);
  set(uc, S::kInit, S::kInit, 0, kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAccessFlags);
  set(ud, S::kInit, S::kInit, 0, kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey);
  // INIT -> RTR
  set(rc, S::kInit, S::kRtr,
      kQpAttrAv | kQpAttrPathMtu | kQpAttrDestQpn | kQpAttrRqPsn |
          kQpAttrMaxDestRdAtomic | kQpAttrMinRnrTimer,
      kQpAttrAltPath | kQpAttrAccessFlags | kQpAttrPkeyIndex);
  set(uc, S::kInit, S::kRtr, kQpAttrAv | kQpAttrPathMtu | kQpAttrDestQpn | kQpAttrRqPsn,
      kQpAttrAltPath | kQpAttrAccessFlags | kQpAttrPkeyIndex);
  set(ud, S::kInit, S::kRtr, 0, kQpAttrPkeyIndex | kQpAttrQkey);
  // RTR -> RTS
  set(rc, S::kRtr, S::kRts,
      kQpAttrSqPsn | kQpAttrTimeout | kQpAttrRetryCnt | kQpAttrRnrRetry |
          kQpAttrMaxQpRdAtomic,
      kQpAttrCurState | kPathAttrs | kQpAttrAccessFlags | kQpAttrMinRnrTimer);
  set(uc, S::kRtr, S::kRts, kQpAttrSqPsn,
      kQpAttrCurState | kPathAttrs | kQpAttrAccessFlags);
  set(ud, S::kRtr, S::kRts, kQpAttrSqPsn, kQpAttrCurState | kQpAttrQkey);
  // RTS -> RTS
  set(rc, S::kRts, S::kRts, 0,
      kQpAttrCurState | kPathAttrs | kQpAttrAccessFlags | kQpAttrMinRnrTimer);
  set(uc, S::kRts, S::kRts, 0, kQpAttrCurState | kPathAttrs | kQpAttrAccessFlags);
  set(ud, S::kRts, S::kRts, 0, kQpAttrCurState | kQpAttrQkey);
  // RTS -> SQD
  for (QpType ty : {rc, uc, ud}) set(ty, S::kRts, S::kSqd, 0, kQpAttrEnSqdAsyncNotify);
  // SQD -> RTS
  set(rc, S::kSqd, S::kRts, 0,
      kQpAttrCurState | kPathAttrs | kQpAttrAccessFlags | kQpAttrMinRnrTimer);
  set(uc, S::kSqd, S::kRts, 0, kQpAttrCurState | kPathAttrs | kQpAttrAccessFlags);
  set(ud, S::kSqd, S::kRts, 0, kQpAttrCurState | kQpAttrQkey);
  // SQD -> SQD: the path may be changed while the send queue is drained.
  // The current state is no attribute of it: only the transitions into RTS
  // from RTR, RTS, SQD and SQE take one (IBTA 11.2.5.2, as the kernel).
  set(rc, S::kSqd, S::kSqd, 0,
      kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAv | kPathAttrs | kQpAttrAccessFlags |
          kQpAttrTimeout | kQpAttrRetryCnt | kQpAttrRnrRetry | kQpAttrMaxQpRdAtomic |
          kQpAttrMaxDestRdAtomic | kQpAttrMinRnrTimer);
  set(uc, S::kSqd, S::kSqd, 0,
      kQpAttrPkeyIndex | kQpAttrPort | kQpAttrAv | kPathAttrs | kQpAttrAccessFlags);
  set(ud, S::kSqd, S::kSqd, 0, kQpAttrPkeyIndex | kQpAttrQkey);
  // SQE -> RTS: only unreliable QPs enter SQE (IBTA 10.3.1.6).
  set(uc, S::kSqe, S::kRts, 0, kQpAttrCurState | kQpAttrAccessFlags);
  set(ud, S::kSqe, S::kRts, 0, kQpAttrCurState | kQpAttrQkey);
  add_xrc_rules(t);
  return t;
}

constexpr Table kTable = build_table();

}  // namespace

const char* to_string(QpState state) {
  switch (state) {
    case QpState::kReset: return "RESET";
    case QpState::kInit: return "INIT";
    case QpState::kRtr: return "RTR";
    case QpState::kRts: return "RTS";
    case QpState::kSqd: return "SQD";
    case QpState::kSqe: return "SQE";
    case QpState::kErr: return "ERR";
  }
  return "?";
}

const char* to_string(QpType type) {
  switch (type) {
    case QpType::kRc: return "RC";
    case QpType::kUc: return "UC";
    case QpType::kUd: return "UD";
    case QpType::kXrcSend: return "XRC_INI";
    case QpType::kXrcRecv: return "XRC_TGT";
  }
  return "?";
}

TransitionRule transition_rule(QpType type, QpState cur, QpState next) {
  return kTable.rule[idx(type)][idx(cur)][idx(next)];
}

uint32_t applicable_attributes(QpType type, uint32_t mask) {
  switch (type) {
    case QpType::kXrcSend: return mask & ~(kQpAttrMaxDestRdAtomic | kQpAttrMinRnrTimer);
    case QpType::kXrcRecv:
      return mask & ~(kQpAttrMaxQpRdAtomic | kQpAttrRetryCnt | kQpAttrRnrRetry);
    default: return mask;
  }
}

Errno check_transition(QpType type, QpState cur, uint32_t mask, QpState next) {
  if (!(mask & kQpAttrState)) next = cur;
  TransitionRule rule = transition_rule(type, cur, next);
  if (!rule.valid) return EINVAL;
  const uint32_t given = mask & ~kQpAttrState;
  if ((given & rule.required) != rule.required) return EINVAL;
  if (given & ~(rule.required | rule.optional)) return EINVAL;
  return 0;
}

}  // namespace softverbs
