// Memory windows (IBTA 10.6.7): an R_Key for part of an MR, with rights of
// its own, bound and invalidated through a send queue.
//
// Type 1 windows are bound by ibv_bind_mw and may be bound again while
// bound; any QP of their PD reaches them. Type 2 windows are bound by a
// posted WR, only when free, to the QP that posts it: only that QP reaches
// them, until a local or remote invalidation frees them. A binding names
// bytes of an MR by the MR's own addresses; the window is addressed by
// those addresses or, zero-based (type 2 only), from 0.
//
// Keys: a window's R_Key has the MR keys' form, a 24-bit index and a key
// byte; each binding may change the key byte (ibv_inc_rkey), never the
// index, so a key of an earlier binding misses.
//
// Threads: everything here is read under the HCA's MR table lock (shared)
// and changed under it (exclusive), as MRs are.
#pragma once

#include <cstdint>

#include "emulator/objects/object_quota.h"
#include "emulator/types.h"

namespace softverbs {

class Pd;
class Mr;
struct QpImpl;

enum class MwType : uint8_t { kType1 = 1, kType2 = 2 };

class Mw {
 public:
  ~Mw();
  MwType type() const { return type_; }
  Pd& pd() const { return *pd_; }
  // The R_Key given at allocation.
  uint32_t initial_rkey() const { return initial_rkey_; }
  uint32_t index() const { return initial_rkey_ >> 8; }

  // ---- with the MR table locked exclusively

  // Binds the window as `request` asks, on behalf of `qp`, to `mr` (nullptr
  // when the lkey names none) under `new_rkey`. false, changing nothing,
  // when a rule forbids it (the WR completes with a bind error).
  bool bind_locked(QpImpl& qp, Mr* mr, const MwBindRequest& request, uint32_t new_rkey);
  // Frees a type 2 window bound under `rkey` (local or remote
  // invalidation); false when `rkey` names no such window of `qp`'s PD or,
  // remote, of `qp` itself.
  bool invalidate_locked(const QpImpl& qp, uint32_t rkey, bool remote);
  // The window loses its binding: its MR or its QP is going.
  void unbind_locked();

  // ---- with the MR table locked (shared is enough)

  // Where [va, va+len) through `rkey` lies in host memory for an access of
  // `access` rights by `qp`; false when the window refuses it.
  bool resolve_locked(const QpImpl& qp, uint32_t rkey, uint64_t va, uint64_t len,
                      uint32_t access, uint64_t& host) const;
  const Mr* bound_mr() const { return mr_; }
  const QpImpl* bound_qp() const { return qp_; }

 private:
  friend class Hca;
  Mw(Pd& pd, MwType type, uint32_t rkey, ObjectQuota::Slot slot);
  bool may_bind_locked(const QpImpl& qp, const Mr* mr, const MwBindRequest& request,
                       uint32_t new_rkey) const;

  Pd* pd_;
  MwType type_;
  uint32_t initial_rkey_;
  uint32_t rkey_;
  // The binding: none while mr_ is null.
  Mr* mr_ = nullptr;
  QpImpl* qp_ = nullptr;  // type 2: the QP it is bound to
  uint64_t start_ = 0;          // first byte, in the MR's address space
  uint64_t length_ = 0;
  uint32_t access_ = 0;
  bool zero_based_ = false;
  ObjectQuota::Slot slot_;
};

}  // namespace softverbs
