// Registration, re-registration and prefetch of MRs; device memory.
#include "emulator/objects/mr.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "emulator/memory/address_space.h"
#include "emulator/memory/app_memory.h"
#include "emulator/objects/hca_impl.h"
#include "emulator/objects/memory_window.h"
#include "emulator/same_host/shared_pages.h"
#include "emulator/same_host/target_table.h"

namespace softverbs {
namespace {

constexpr uint32_t kWriteAccess = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteAtomic;

bool valid_access(uint32_t access) {
  constexpr uint32_t all = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                           kAccessRemoteAtomic | kAccessMwBind | kAccessFlushGlobal;
  // No soft MR is persistent memory: kAccessFlushPersistent has no target.
  if (access & ~all) return false;
  // IBTA 10.6.3.1: remote write or atomic access requires local write.
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) && !(access & kAccessLocalWrite))
    return false;
  return true;
}

uint64_t page_size() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

bool valid_range(uint64_t addr, uint64_t length) {
  return length != 0 && addr + length - 1 >= addr;
}

// The kernel pins the pages an MR's bytes lie in, and an MR that would pin
// none is EINVAL: length 0 registers (on rxe and mlx5 alike) only at an
// address inside a page, whose one page is then pinned.
bool valid_memory_range(uint64_t addr, uint64_t length) {
  if (length == 0) return (addr & (page_size() - 1)) != 0;
  return valid_range(addr, length);
}

// What the kernel's pinning of the pages checks (EFAULT): mapped, and
// writable when the HCA may write. On-demand MRs pin nothing.
Errno check_pinnable(const MrInit& init) {
  if (init.on_demand) return 0;
  const uint64_t pinned = init.length == 0 ? 1 : init.length;  // the page holding addr
  return range_is_mapped(init.addr, pinned, (init.access & kWriteAccess) != 0) ? 0 : EFAULT;
}

// The MR as initiators executing on this process see it (target_table.h).
void publish_for_initiators(Hca::Impl& hca, const Mr& mr) {
  if (mr.kind() == MrKind::kNull) return;
  hca.engine->same_host().target_table().publish_mr(TargetMemory{
      hca.description.index, mr.rkey(), mr.access(), reinterpret_cast<uint64_t>(&mr.pd()),
      mr.iova(), mr.length(), mr.host_address(mr.iova()), mr.shared_pages()});
}

// Whether the pages of memory that peers may write, read or update are
// shared (unless the process turned sharing off: shared_pages.h), and
// when: at registration, or, where that would copy 16 MiB or more, once
// a peer reaches for them (deferred_sharing.h).
enum class Sharing : uint8_t { kNever, kNow, kWhenWanted };
Sharing sharing_for(const MrInit& init) {
  constexpr uint32_t remote = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  if (!SharedPages::enabled() || init.on_demand || !(init.access & remote)) return Sharing::kNever;
  return init.length >= DeferredSharing::kDeferredFrom ? Sharing::kWhenWanted : Sharing::kNow;
}

// The pages shared at registration: all that may be, below 16 MiB; from
// there, only pages already shared, which need no copy.
std::optional<SharedPagesRef> pages_shared_now(const MrInit& init) {
  switch (sharing_for(init)) {
    case Sharing::kNow: return SharedPages::process().share(init.addr, init.length);
    case Sharing::kWhenWanted: return SharedPages::process().join(init.addr, init.length);
    default: return std::nullopt;
  }
}

// Whether a later move could share them.
bool worth_deferring(const MrInit& init, const std::optional<SharedPagesRef>& shared_now) {
  return !shared_now && sharing_for(init) == Sharing::kWhenWanted &&
         SharedPages::whole_pages(init.addr, init.length);
}

void release_pages(const std::optional<SharedPagesRef>& pages) {
  if (pages) SharedPages::process().release(*pages);
}

}  // namespace

void Hca::Impl::defer_sharing(Mr& mr) {
  DeferredSharing::Job job;
  job.device_index = description.index;
  job.rkey = mr.rkey_;
  job.addr = mr.addr_;
  job.length = mr.length_;
  // Peers stop reaching the old pages by system calls (their operations
  // travel as packets, placed here) until the MR is published again.
  job.before_move = [this, &mr] {
    std::unique_lock lock(mr_mutex);
    engine->same_host().target_table().withdraw_mr(description.index, mr.rkey_);
  };
  job.after_move = [this, &mr](const std::optional<SharedPagesRef>& pages) {
    std::unique_lock lock(mr_mutex);
    mr.pages_ = pages;
    mr.deferred_ = nullptr;
    publish_for_initiators(*this, mr);
  };
  // Under the lock: the job cannot end (after_move) before its handle is kept.
  std::unique_lock lock(mr_mutex);
  mr.deferred_ = engine->same_host().deferred_sharing().add(std::move(job));
}

void Hca::Impl::stop_deferred_sharing(Mr& mr) {
  DeferredSharing::Handle handle;
  {
    std::shared_lock lock(mr_mutex);
    handle = mr.deferred_;
  }
  if (!handle) return;
  engine->same_host().deferred_sharing().cancel(handle);
  std::unique_lock lock(mr_mutex);
  mr.deferred_ = nullptr;
}

Mr::Mr(Pd& pd, MrKind kind, const MrInit& init, uint32_t key, ObjectQuota::Slot slot,
       std::optional<SharedPagesRef> pages)
    : pd_(&pd), kind_(kind), addr_(init.addr), length_(init.length), iova_(init.iova),
      access_(init.access), on_demand_(init.on_demand), lkey_(key),
      rkey_(kind == MrKind::kNull ? 0 : key), slot_(std::move(slot)), pages_(pages) {}

Mr::~Mr() {
  Hca::Impl& hca = pd_->hca().impl();
  hca.stop_deferred_sharing(*this);
  {
    // Exclusive: waits for any access in progress (they hold it shared).
    std::unique_lock lock(hca.mr_mutex);
    hca.mrs_by_key.erase(lkey_);
    hca.engine->same_host().target_table().withdraw_mr(hca.description.index, rkey_);
    // Windows bound to it lose their binding: their R_Keys reach nothing.
    for (auto it = hca.mws_by_index.begin(); bound_windows_ && it != hca.mws_by_index.end(); ++it)
      if (it->second->bound_mr() == this) it->second->unbind_locked();
  }
  release_pages(pages_);
  if (device_memory_) device_memory_->users.fetch_sub(1);
  pd_->users.fetch_sub(1);
  hca.recheck_receives(lkey_);
}

// Enters a new MR in the table; `slot` is its place under max_mr.
using MakeMr = std::unique_ptr<Mr> (*)(Pd&, uint32_t key, const void* arg, ObjectQuota::Slot);
static std::unique_ptr<Mr> enter_mr(Hca::Impl& hca, MakeMr make, Pd& pd, const void* arg,
                                    ObjectQuota::Slot slot) {
  std::unique_lock lock(hca.mr_mutex);
  std::unique_ptr<Mr> mr = make(pd, hca.next_key_locked(), arg, std::move(slot));
  hca.mrs_by_key[mr->lkey()] = mr.get();
  publish_for_initiators(hca, *mr);
  pd.users.fetch_add(1);
  return mr;
}

std::unique_ptr<Mr> Hca::register_mr(Pd& pd, const MrInit& init, Errno& err) {
  if (!valid_access(init.access) || !valid_memory_range(init.addr, init.length) ||
      (init.length != 0 && !valid_range(init.iova, init.length))) {
    err = EINVAL;
    return nullptr;
  }
  if ((err = check_pinnable(init))) return nullptr;
  struct Registration {
    const MrInit& init;
    std::optional<SharedPagesRef> pages;
  };
  auto make = [](Pd& p, uint32_t key, const void* arg, ObjectQuota::Slot slot) {
    const auto& r = *static_cast<const Registration*>(arg);
    return std::unique_ptr<Mr>(
        new Mr(p, MrKind::kMemory, r.init, key, std::move(slot), r.pages));
  };
  ObjectQuota::Slot slot = take_slot(ObjectKind::kMr, err);
  if (!slot) return nullptr;
  const Registration registration{init, pages_shared_now(init)};
  std::unique_ptr<Mr> mr = enter_mr(*impl_, make, pd, &registration, std::move(slot));
  if (worth_deferring(init, registration.pages)) impl_->defer_sharing(*mr);
  return mr;
}

std::unique_ptr<Mr> Hca::register_mr(Pd& pd, uint64_t addr, uint64_t length, uint32_t access,
                                     Errno& err) {
  return register_mr(pd, MrInit{addr, length, addr, access, false}, err);
}

std::unique_ptr<Mr> Hca::register_null_mr(Pd& pd, Errno& err) {
  // The whole address space, as mlx5 reports it (addr 0, length SIZE_MAX).
  static const MrInit kEverything{0, UINT64_MAX, 0, kAccessLocalWrite, false};
  auto make = [](Pd& p, uint32_t key, const void*, ObjectQuota::Slot slot) {
    return std::unique_ptr<Mr>(new Mr(p, MrKind::kNull, kEverything, key, std::move(slot)));
  };
  ObjectQuota::Slot slot = take_slot(ObjectKind::kMr, err);
  if (!slot) return nullptr;
  return enter_mr(*impl_, make, pd, nullptr, std::move(slot));
}

std::unique_ptr<Mr> Hca::register_device_memory_mr(Pd& pd, DeviceMemory& dm, uint64_t offset,
                                                   uint64_t length, uint32_t access, Errno& err) {
  // Length 0 is a valid device-memory MR (mlx5 registers it): it covers no
  // byte, so only zero-length accesses pass its bounds.
  if (!valid_access(access) || offset > dm.length() || length > dm.length() - offset) {
    err = EINVAL;
    return nullptr;
  }
  const MrInit init{reinterpret_cast<uint64_t>(dm.base()) + offset, length, 0, access, false};
  auto make = [](Pd& p, uint32_t key, const void* arg, ObjectQuota::Slot slot) {
    return std::unique_ptr<Mr>(
        new Mr(p, MrKind::kDeviceMemory, *static_cast<const MrInit*>(arg), key,
               std::move(slot)));
  };
  ObjectQuota::Slot slot = take_slot(ObjectKind::kMr, err);
  if (!slot) return nullptr;
  std::unique_ptr<Mr> mr = enter_mr(*impl_, make, pd, &init, std::move(slot));
  mr->device_memory_ = &dm;
  dm.users.fetch_add(1);
  return mr;
}

Errno Hca::reregister_mr(Mr& mr, const MrChange& change) {
  if (mr.kind_ != MrKind::kMemory) return EINVAL;
  if (change.pd && &change.pd->hca() != this) return EINVAL;
  MrInit next{mr.addr_, mr.length_, mr.iova_, mr.access_, mr.on_demand_};
  if (change.translation) {
    next.addr = change.translation->addr;
    next.length = change.translation->length;
    next.iova = change.translation->iova;
  }
  if (change.access) next.access = *change.access;
  if (change.on_demand) next.on_demand = *change.on_demand;
  if (!valid_access(next.access) || !valid_range(next.addr, next.length) ||
      !valid_range(next.iova, next.length))
    return EINVAL;
  // New memory, or a new right to write into the old: pinned again.
  const bool repin = change.translation || (next.access & kWriteAccess & ~mr.access_) ||
                     (mr.on_demand_ && !next.on_demand);
  if (repin)
    if (Errno err = check_pinnable(next)) return err;
  Pd* old_pd = mr.pd_;
  impl_->stop_deferred_sharing(mr);
  std::optional<SharedPagesRef> pages = pages_shared_now(next);
  const bool defer = worth_deferring(next, pages);
  {
    std::unique_lock lock(impl_->mr_mutex);
    impl_->engine->same_host().target_table().withdraw_mr(impl_->description.index, mr.rkey_);
    std::swap(mr.pages_, pages);  // `pages` now the old ones, released below
    mr.addr_ = next.addr;
    mr.length_ = next.length;
    mr.iova_ = next.iova;
    mr.access_ = next.access;
    mr.on_demand_ = next.on_demand;
    if (change.pd) mr.pd_ = change.pd;
    publish_for_initiators(*impl_, mr);
  }
  release_pages(pages);
  if (defer) impl_->defer_sharing(mr);
  if (change.pd && change.pd != old_pd) {
    change.pd->users.fetch_add(1);
    old_pd->users.fetch_sub(1);
  }
  impl_->recheck_receives(mr.lkey_);
  return 0;
}

// mlx5's rules (ibv_advise_mr(3) leaves the errno of each case open):
// an lkey that names no on-demand MR is ENOENT, an MR of another PD or a
// write prefetch of an MR without local write EPERM; a range outside the MR
// EFAULT. Without `wait` the pages are made present as far as they can be
// (best effort, as the kernel's deferred work); with it, a range that
// cannot be is EFAULT.
Errno Hca::prefetch_mr(Pd& pd, std::span<const Sge> sges, Prefetch advice, bool wait) {
  std::shared_lock lock(impl_->mr_mutex);
  for (const Sge& sge : sges) {
    const Mr* mr = impl_->find_mr_locked(sge.lkey);
    if (!mr || mr->kind_ != MrKind::kMemory || !mr->on_demand_) return ENOENT;
    if (mr->pd_ != &pd) return EPERM;
    if (advice == Prefetch::kWrite && !(mr->access_ & kAccessLocalWrite)) return EPERM;
    if (!mr->contains(sge.addr, sge.length)) return EFAULT;
  }
  if (advice == Prefetch::kNoFault) return 0;
  for (const Sge& sge : sges) {
    const Mr* mr = impl_->find_mr_locked(sge.lkey);
    auto* host = reinterpret_cast<void*>(mr->host_address(sge.addr));
    if (!app_memory::populate(host, sge.length, advice == Prefetch::kWrite) && wait)
      return EFAULT;
  }
  return 0;
}

// ---------------------------------------------------------------- device memory

std::unique_ptr<DeviceMemory> Hca::alloc_device_memory(uint64_t length, uint32_t log_align,
                                                       Errno& err) {
  const uint64_t page = page_size();
  // The mapping is page-aligned, which serves any alignment up to a page.
  if (length == 0 || length > impl_->attributes.max_dm_size || log_align >= 64 ||
      (uint64_t{1} << log_align) > page) {
    err = EINVAL;
    return nullptr;
  }
  const uint64_t reserved = (length + page - 1) / page * page;
  uint64_t used = impl_->device_memory_in_use.load();
  do {
    if (reserved > impl_->attributes.max_dm_size - std::min(used, impl_->attributes.max_dm_size)) {
      err = ENOMEM;
      return nullptr;
    }
  } while (!impl_->device_memory_in_use.compare_exchange_weak(used, used + reserved));
  void* base = mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    impl_->device_memory_in_use.fetch_sub(reserved);
    err = ENOMEM;
    return nullptr;
  }
  err = 0;
  return std::unique_ptr<DeviceMemory>(
      new DeviceMemory(*this, static_cast<uint8_t*>(base), length, reserved));
}

DeviceMemory::~DeviceMemory() {
  munmap(base_, reserved_);
  hca_.impl().device_memory_in_use.fetch_sub(reserved_);
}

Errno DeviceMemory::copy_in(uint64_t offset, const void* from, uint64_t length) {
  if (offset > length_ || length > length_ - offset) return EFAULT;
  if ((offset | length) % 4) return EINVAL;
  // The host side is the caller's buffer: a bad pointer is its own fault,
  // as with memcpy; the device side is ours and always mapped.
  std::memcpy(base_ + offset, from, length);
  return 0;
}

Errno DeviceMemory::copy_out(void* to, uint64_t offset, uint64_t length) const {
  if (offset > length_ || length > length_ - offset) return EFAULT;
  if ((offset | length) % 4) return EINVAL;
  std::memcpy(to, base_ + offset, length);
  return 0;
}

}  // namespace softverbs
