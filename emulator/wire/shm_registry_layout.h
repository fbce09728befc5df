// The registry segment's layout, shared by every process of one user. Its
// size and the limits below are part of the version: processes of another
// version refuse it (EPROTO) instead of misreading it.
//
// Crash safety: a process may die (SIGKILL) anywhere, even holding the
// registry lock (a record lock on the segment, shm_registry_access.h, which
// the kernel then releases). Every update is ordered so that what it leaves behind is harmless:
// a slot is marked used only after its fields are written and marked free
// only after its QPNs, multicast attachments and CM bindings are cleared; a
// table entry is marked used (its owner byte set) only after its other
// fields are written; a QPN count is raised before the table entry is set
// and lowered after it is cleared, so it never undercounts.
#pragma once

#include <sys/types.h>


#include <atomic>
#include <cstdint>

namespace softverbs {

// 255 so that a QPN's owner (slot + 1) fits in a byte: the QPN table, the
// bulk of the segment, is then 2 MiB, all of it reserved when created.
inline constexpr uint32_t kMaxProcessSlots = 255;
inline constexpr uint32_t kMaxRegistryDevices = 16;
// QPNs 2 .. kQpnTableSize-1 are handed out; 0 and 1 are QP0 and QP1.
inline constexpr uint32_t kQpnTableSize = 1u << 17;
inline constexpr uint32_t kFirstAllocatableQpn = 2;

// Multicast attachments (QP, group) of every process, all devices together,
// and the limits the devices advertise (max_mcast_grp, max_mcast_qp_attach).
inline constexpr uint32_t kMaxMulticastAttachments = 1024;
inline constexpr uint32_t kMaxMulticastGroups = 64;
inline constexpr uint32_t kMaxMulticastQpsPerGroup = 16;
static_assert(kMaxMulticastGroups * kMaxMulticastQpsPerGroup == kMaxMulticastAttachments);

// Connection-manager port bindings of every process, all devices together.
inline constexpr uint32_t kMaxCmBindings = 1024;

inline constexpr uint64_t kRegistryMagic = 0x67722d76667373ull;  // "ssfv-rg"
// 2: one byte per QPN owner, 255 process slots, memory reserved at creation.
// 3: multicast attachments.
// 4: connection-manager port bindings.
inline constexpr uint32_t kRegistryVersion = 5;

// Fields read without the registry lock are plain integers accessed through
// std::atomic_ref: the segment starts as zeros, and zero is every field's
// initial value, so nothing has to be constructed and untouched pages of the
// QPN table stay unallocated.
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint8_t>::is_always_lock_free);

// A process's liveness is a record lock it holds on byte
// kLivenessLockBase + slot of the segment while it lives, which the kernel
// drops when it dies (shm_registry_liveness.cc): the same seen from every
// PID namespace, where pids are not.
struct RegistryProcessSlot {
  uint64_t generation;  // 0: free. Unique for the registry's lifetime.
  uint64_t start_time;  // clock ticks since boot, tells a reused pid apart
  uint32_t pid;         // in its own PID namespace: for people, not for liveness
  uint32_t qpn_count;   // under the registry lock; never lower than the QPNs held
};
// Byte 0 of the segment is the registry lock's (shm_registry_access.h).
inline constexpr off_t kLivenessLockBase = 1;

// One QP attached to one multicast group. Written and read under the registry lock;
// a free entry has owner 0.
struct RegistryMulticastAttachment {
  uint8_t gid[16];
  uint32_t qpn;
  uint8_t device;
  uint8_t owner;  // slot + 1
  uint16_t lid;
};

// One connection-manager port binding: (port space, port, address) held by
// a process, and whether it listens. Written and read under the registry lock; a
// free entry has owner 0.
struct RegistryCmBinding {
  uint8_t address[16];  // IPv6 or IPv4-mapped; all zero: any address
  uint32_t agent_qpn;   // the owner's CM agent (UD QP of device 0)
  uint16_t port_space;  // RDMA_PS_*
  uint16_t port;        // host byte order
  uint8_t listening;
  uint8_t owner;  // slot + 1
};

struct RegistryLayout {
  uint64_t magic;  // written last, with release, by the creator
  uint32_t version;
  uint32_t max_slots;
  uint32_t max_devices;
  uint32_t qpn_table_size;
  uint64_t total_bytes;
  // Under the registry lock:
  uint64_t last_generation;
  uint32_t next_qpn[kMaxRegistryDevices];  // round-robin cursors
  alignas(64) RegistryProcessSlot slots[kMaxProcessSlots];
  alignas(64) RegistryMulticastAttachment multicast[kMaxMulticastAttachments];
  alignas(64) RegistryCmBinding cm_bindings[kMaxCmBindings];
  // Owner of each QPN: slot index + 1, or 0 when free. Written under the
  // registry lock, read lock-free by the data path. Any value a byte can hold names
  // a slot in range or none.
  alignas(4096) uint8_t qpn_owner[kMaxRegistryDevices][kQpnTableSize];
};

static_assert(kMaxProcessSlots <= UINT8_MAX);

}  // namespace softverbs
