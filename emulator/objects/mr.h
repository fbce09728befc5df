// Memory regions and device memory (IBTA 10.6): what a key names.
//
// An MR has an address space of its own: its first byte is at `iova`
// through its keys (the virtual address by default, 0 when zero-based, any
// value with ibv_reg_mr_iova), and lies at host address `addr`. Every local
// SGE and remote address is translated: host = addr + (va - iova).
//
// Threads: an MR's fields are read under the HCA's MR table lock (shared)
// by every access and changed only under it (exclusive) by
// re-registration, so an access sees the MR before or after, never half.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "emulator/objects/object_quota.h"
#include "emulator/same_host/deferred_sharing.h"
#include "emulator/same_host/shared_pages.h"
#include "emulator/types.h"

namespace softverbs {

class Hca;
class Pd;
class DeviceMemory;
class Mw;

enum class MrKind : uint8_t {
  kMemory,        // the process's memory (ibv_reg_mr)
  kNull,          // reads give zeros, writes are dropped (ibv_alloc_null_mr)
  kDeviceMemory,  // an HCA's device memory (ibv_reg_dm_mr)
};

// What a registration of memory asks for.
struct MrInit {
  uint64_t addr = 0;    // host address of the first byte
  uint64_t length = 0;
  uint64_t iova = 0;    // its address through the keys
  uint32_t access = 0;  // Access bits
  // On-demand paging: nothing need be mapped now; an access to memory that
  // is not mapped when it happens fails as an access error.
  bool on_demand = false;
};

// What a re-registration changes; a null member stays as it is.
struct MrChange {
  Pd* pd = nullptr;
  // New memory: addr, length, iova (the access comes from `access`).
  const MrInit* translation = nullptr;
  // New access bits and on-demand paging.
  const uint32_t* access = nullptr;
  const bool* on_demand = nullptr;
};

// Advice for on-demand MRs (ibv_advise_mr(3)).
enum class Prefetch : uint8_t {
  kRead,     // make the pages present
  kWrite,    // make them present and writable
  kNoFault,  // take only the pages already present: nothing to do here
};

class Mr {
 public:
  ~Mr();
  uint32_t lkey() const { return lkey_; }
  uint32_t rkey() const { return rkey_; }  // 0 for a null MR: it has none
  uint64_t addr() const { return addr_; }
  uint64_t length() const { return length_; }
  uint64_t iova() const { return iova_; }
  uint32_t access() const { return access_; }
  bool on_demand() const { return on_demand_; }
  MrKind kind() const { return kind_; }
  Pd& pd() const { return *pd_; }
  // Its pages' file, when peers reach them by mapping it (shared_pages.h).
  const std::optional<SharedPagesRef>& shared_pages() const { return pages_; }
  // Its pages are to be shared once a peer of the host reaches for them
  // (deferred_sharing.h), and are not yet.
  bool sharing_deferred() const { return deferred_ != nullptr; }

  // [va, va+len) lies inside the MR's address space.
  bool contains(uint64_t va, uint64_t len) const {
    return va >= iova_ && len <= length_ && va - iova_ <= length_ - len;
  }
  // Where `va` (inside) lies in the host's memory: in the emulator's own
  // mapping of shared pages, which stays on the registered pages whatever
  // the program maps at `addr` later, as an HCA's pinned pages do.
  uint64_t host_address(uint64_t va) const {
    return (pages_ ? pages_->view_address() : addr_) + (va - iova_);
  }

 private:
  friend class Hca;
  friend class Mw;
  Mr(Pd& pd, MrKind kind, const MrInit& init, uint32_t key, ObjectQuota::Slot slot,
     std::optional<SharedPagesRef> pages = std::nullopt);
  Pd* pd_;
  MrKind kind_;
  uint64_t addr_, length_, iova_;
  uint32_t access_;
  bool on_demand_;
  uint32_t lkey_, rkey_;
  DeviceMemory* device_memory_ = nullptr;  // for kDeviceMemory
  ObjectQuota::Slot slot_;
  uint32_t bound_windows_ = 0;  // memory windows bound to it
  std::optional<SharedPagesRef> pages_;
  // Its deferred sharing, until it ran (under the MR table lock).
  std::shared_ptr<DeferredSharing::Pending> deferred_;
};

// Device memory (ibv_alloc_dm(3)): memory of the HCA that the host reaches
// by copies and through MRs. A soft HCA keeps it in the process, outside
// the application's heap.
class DeviceMemory {
 public:
  ~DeviceMemory();
  uint64_t length() const { return length_; }
  // ibv_memcpy_to_dm / ibv_memcpy_from_dm: EFAULT past the end, EINVAL for
  // an offset or length that is not a multiple of 4 (mlx5's rule: device
  // memory is reached in 32-bit words).
  Errno copy_in(uint64_t offset, const void* from, uint64_t length);
  Errno copy_out(void* to, uint64_t offset, uint64_t length) const;
  uint8_t* base() const { return base_; }
  // MRs registered on it: freeing it is refused (EBUSY) while non-zero.
  std::atomic<uint32_t> users{0};

 private:
  friend class Hca;
  DeviceMemory(Hca& hca, uint8_t* base, uint64_t length, uint64_t reserved)
      : hca_(hca), base_(base), length_(length), reserved_(reserved) {}
  Hca& hca_;
  uint8_t* base_;
  uint64_t length_;
  uint64_t reserved_;  // bytes mapped and counted against max_dm_size
};

}  // namespace softverbs
