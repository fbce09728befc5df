// Memory windows: allocation, binding, invalidation and the accesses that
// go through them (memory_window.h).
#include "emulator/objects/memory_window.h"

#include "emulator/objects/qp_impl.h"

namespace softverbs {
namespace {

constexpr uint32_t kRemoteRights = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

// The index part of an R_Key: what a binding may not change.
constexpr uint32_t key_index(uint32_t key) { return key >> 8; }

}  // namespace

Mw::Mw(Pd& pd, MwType type, uint32_t rkey, ObjectQuota::Slot slot)
    : pd_(&pd), type_(type), initial_rkey_(rkey), rkey_(rkey), slot_(std::move(slot)) {}

Mw::~Mw() {
  Hca::Impl& hca = pd_->hca().impl();
  {
    // Exclusive: waits for any access through the window in progress.
    std::unique_lock lock(hca.mr_mutex);
    unbind_locked();
    hca.mws_by_index.erase(index());
  }
  pd_->users.fetch_sub(1);
}

std::unique_ptr<Mw> Hca::alloc_mw(Pd& pd, MwType type, Errno& err) {
  if (type != MwType::kType1 && type != MwType::kType2) {
    err = EINVAL;
    return nullptr;
  }
  ObjectQuota::Slot slot = take_slot(ObjectKind::kMw, err);
  if (!slot) return nullptr;
  std::unique_lock lock(impl_->mr_mutex);
  std::unique_ptr<Mw> mw(new Mw(pd, type, impl_->next_key_locked(), std::move(slot)));
  impl_->mws_by_index[mw->index()] = mw.get();
  pd.users.fetch_add(1);
  err = 0;
  return mw;
}

// What a binding must satisfy (IBTA 10.6.7, memory windows).
bool Mw::may_bind_locked(const QpImpl& qp, const Mr* mr, const MwBindRequest& b,
                         uint32_t new_rkey) const {
  // A type 1 window is bound by ibv_bind_mw, a type 2 by a posted WR.
  if (b.by_verb != (type_ == MwType::kType1)) return false;
  if (pd_ != qp.pd) return false;
  if (key_index(new_rkey) != index()) return false;
  if (b.access & ~kRemoteRights) return false;
  if (type_ == MwType::kType2) {
    if (mr_) return false;  // bound: it must be invalidated first
    if (b.length == 0) return false;
  }
  if (b.length == 0) return true;  // unbinding a type 1 window
  if (b.zero_based && type_ == MwType::kType1) return false;
  if (!mr || &mr->pd() != qp.pd || mr->kind() == MrKind::kNull) return false;
  if (!(mr->access() & kAccessMwBind)) return false;
  // A window that lets peers write must lie in memory the HCA may write.
  if ((b.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) &&
      !(mr->access() & kAccessLocalWrite))
    return false;
  return mr->contains(b.addr, b.length);
}

bool Mw::bind_locked(QpImpl& qp, Mr* mr, const MwBindRequest& b, uint32_t new_rkey) {
  if (!may_bind_locked(qp, mr, b, new_rkey)) return false;
  unbind_locked();
  rkey_ = new_rkey;
  if (b.length == 0) return true;
  mr_ = mr;
  ++mr_->bound_windows_;
  if (type_ == MwType::kType2) {
    qp_ = &qp;
    ++qp_->bound_windows;
  }
  start_ = b.addr;
  length_ = b.length;
  access_ = b.access;
  zero_based_ = b.zero_based;
  return true;
}

bool Mw::invalidate_locked(const QpImpl& qp, uint32_t rkey, bool remote) {
  // Only type 2 windows are invalidated (IBTA 10.6.7); a remote
  // invalidation only by the QP the window is bound to.
  if (type_ != MwType::kType2 || !mr_ || rkey != rkey_ || pd_ != qp.pd) return false;
  if (remote && qp_ != &qp) return false;
  unbind_locked();
  return true;
}

void Mw::unbind_locked() {
  if (mr_) --mr_->bound_windows_;
  if (qp_) --qp_->bound_windows;
  mr_ = nullptr;
  qp_ = nullptr;
  start_ = length_ = 0;
  access_ = 0;
  zero_based_ = false;
}

bool Mw::resolve_locked(const QpImpl& qp, uint32_t rkey, uint64_t va, uint64_t len,
                        uint32_t access, uint64_t& host) const {
  if (!mr_ || rkey != rkey_ || (access_ & access) != access) return false;
  if (type_ == MwType::kType1 ? pd_ != qp.pd : qp_ != &qp) return false;
  const uint64_t base = zero_based_ ? 0 : start_;
  if (va < base || len > length_ || va - base > length_ - len) return false;
  const uint64_t mr_va = start_ + (va - base);
  if (!mr_->contains(mr_va, len)) return false;
  host = mr_->host_address(mr_va);
  return true;
}

// ---- what a QP does with windows

WcStatus QpImpl::bind_window(const SendWqe& w) {
  Hca::Impl& h = hca->impl();
  std::unique_lock lock(h.mr_mutex);
  Mw* mw = h.find_mw_locked(w.bind.mw_index);
  Mr* mr = w.bind.length ? h.find_mr_locked(w.bind.mr_lkey) : nullptr;
  MwBindRequest request;
  request.mr_lkey = w.bind.mr_lkey;
  request.addr = w.bind.addr;
  request.length = w.bind.length;
  request.access = w.bind.access;
  request.zero_based = w.bind.zero_based;
  request.by_verb = w.bind.by_verb;
  const bool bound = mw && mw->bind_locked(*this, mr, request, w.rkey);
  return bound ? WcStatus::kSuccess : WcStatus::kMwBindErr;
}

bool QpImpl::invalidate_window(uint32_t rkey, bool remote) {
  Hca::Impl& h = hca->impl();
  std::unique_lock lock(h.mr_mutex);
  Mw* mw = h.find_mw_locked(key_index(rkey));
  return mw && mw->invalidate_locked(*this, rkey, remote);
}

void QpImpl::release_windows() {
  Hca::Impl& h = hca->impl();
  std::unique_lock lock(h.mr_mutex);
  for (auto it = h.mws_by_index.begin(); bound_windows && it != h.mws_by_index.end(); ++it)
    if (it->second->bound_qp() == this) it->second->unbind_locked();
}

}  // namespace softverbs
