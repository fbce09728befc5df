// The host-wide registry of one user's softverbs processes: which process
// slots are taken, and which process owns each QPN of each soft device, so
// that QPNs are unique across processes as on one real HCA; which QPs are
// in which multicast group; and which process holds which connection-manager
// port. It lives in the shared-memory segment "/<prefix>-<euid>-registry"
// (mode 0600).
//
// Processes come and go without telling anyone: a slot whose process has
// died (its pid gone, or now another process's, told apart by start time)
// is reclaimed, with everything it held and its mailbox segment, by the
// next attach(), allocate_qpn(), attach_multicast() or bind_cm_port() of
// any process. The last process to detach removes the
// segment, so nothing stays in /dev/shm.
//
// Threads: every method may be called from any thread.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emulator/types.h"
#include "emulator/wire/shm_registry_layout.h"
#include "emulator/wire/shm_segment.h"

namespace softverbs {

// One attached process: its slot, and the generation that makes the pair
// unique even after the slot is reused.
struct ProcessRef {
  uint32_t slot = 0;
  uint32_t pid = 0;
  uint64_t generation = 0;
};

class ShmRegistry {
 public:
  // Maps (creating if needed) the registry segment of this user, claims a
  // process slot for this process, and reclaims slots (and their QPNs, and
  // their mailbox segments) of dead processes. nullptr + err on failure:
  // EACCES (segment not ours or not 0600), EAGAIN (no free slot, or the
  // segment never got initialized), EPROTO (another layout version), EINVAL
  // ($SOFTVERBS_SHM_PREFIX unusable), ENOSPC (no room in /dev/shm to create
  // the segment, whose memory is reserved at creation; a message on stderr
  // says how to make room), ETIMEDOUT (the registry lock stayed taken),
  // ENOMEM.
  static std::unique_ptr<ShmRegistry> attach(Errno& err);
  // Releases this process's QPNs and slot; unlinks the segment if no process
  // is left attached. Destroy the ShmWire built on this registry first.
  ~ShmRegistry();

  ShmRegistry(const ShmRegistry&) = delete;
  ShmRegistry& operator=(const ShmRegistry&) = delete;

  // What the destructor does for other processes, keeping the mapping: the
  // slot, its QPNs, groups, CM ports and mailbox name are released, and the
  // last process attached removes the segments' names. For a process that
  // exits while its threads may still read the registry; idempotent.
  void leave();

  ProcessRef self() const { return self_; }

  // Allocates a QPN of device `device_index` (0..15) unique among all live
  // processes; never 0 or 1 (QP0/QP1). Round robin over the space, so a
  // freed QPN comes back as late as possible. EAGAIN when the space is
  // exhausted, EINVAL on a bad device.
  Errno allocate_qpn(uint32_t device_index, uint32_t& qpn);
  // Frees a QPN this process owns; anything else is ignored.
  void release_qpn(uint32_t device_index, uint32_t qpn);

  // Which process owns that QPN now. false when unallocated or its owner is
  // dead. Makes syscalls to check liveness.
  bool lookup_qpn(uint32_t device_index, uint32_t qpn, ProcessRef& owner) const;
  // The same without the liveness check: no lock, no syscall, for the data
  // path. A crashed owner is reported until its slot is reclaimed.
  bool find_qpn_owner(uint32_t device_index, uint32_t qpn, ProcessRef& owner) const;

  // Multicast groups (IBTA 10.5), one fabric for every soft device of the
  // host: which QPs of which processes are attached to the group with GID
  // `gid`. attach is idempotent; ENOMEM when the table is full, EINVAL for a
  // bad device; detach EINVAL when the QP was not attached. A dead
  // process's attachments go with its slot.
  Errno attach_multicast(uint32_t device_index, const Gid& gid, uint16_t lid, uint32_t qpn);
  Errno detach_multicast(uint32_t device_index, const Gid& gid, uint16_t lid, uint32_t qpn);
  struct MulticastMember {
    uint32_t device_index = 0;
    uint32_t qpn = 0;
    uint32_t slot = 0;
  };
  // The group's members; a group named by LID only (no GRH) matches on lid.
  Errno multicast_members(const Gid* gid, uint16_t lid, std::vector<MulticastMember>& out) const;

  // Connection-manager port bindings (the RDMA CM's port spaces), every
  // soft device together, as the kernel's are per network namespace: which
  // process holds port P of port space S on address A, whether it listens
  // there, and where its CM agent receives. A dead process's bindings go
  // with its slot.
  struct CmBinding {
    uint16_t port_space = 0;  // RDMA_PS_* (0x0002 IPoIB, 0x0106 TCP, 0x0111 UDP, 0x013F IB)
    uint16_t port = 0;        // host byte order
    Gid address{};            // IPv6, or IPv4-mapped (::ffff:a.b.c.d); all zero: any address
    uint32_t agent_qpn = 0;   // the owner's CM agent UD QPN (on device 0)
    bool listening = false;
    uint32_t slot = 0;        // owner's process slot (output of lookups)
    uint64_t generation = 0;  // owner's slot generation (output of lookups)
    uint32_t pid = 0;         // owner's process (output of lookups)
  };
  // Ports handed out for port 0: the kernel's default ip_local_port_range.
  static constexpr uint16_t kFirstEphemeralCmPort = 32768;
  static constexpr uint16_t kLastEphemeralCmPort = 60999;
  // Reserves (port_space, port, address) for this process and returns a
  // handle for the calls below. The any address is all zero; ::ffff:0.0.0.0
  // is taken for it too. port 0 picks a free ephemeral port (random start,
  // then upwards, as the kernel does) and writes it back. A live process
  // (this one included) holding that port of that space conflicts, as the
  // kernel's cma_check_port decides: on the same address EADDRINUSE; when
  // either address is the any address EADDRNOTAVAIL. Also EADDRNOTAVAIL
  // when no ephemeral port is free, ENOMEM when the table is full, EINVAL
  // when this registry holds no slot, ETIMEDOUT (the registry lock stayed
  // taken).
  Errno bind_cm_port(uint16_t port_space, const Gid& address, uint16_t& port,
                     uint32_t agent_qpn, uint32_t& handle);
  // Marks the binding as listening (idempotent). EINVAL for a handle not
  // ours, ETIMEDOUT as above.
  Errno listen_cm_port(uint32_t handle);
  // Frees a binding of this process; anything else is ignored.
  void release_cm_port(uint32_t handle);
  // The live listener for a connection to (port_space, port, address): one
  // bound to exactly that address wins over one bound to the any address.
  // false when there is none (or the registry lock stayed taken). Makes
  // syscalls to check liveness.
  bool find_cm_listener(uint16_t port_space, uint16_t port, const Gid& address,
                        CmBinding& out) const;
  // Every listening binding of a live process (the CLI's `listeners`).
  std::vector<CmBinding> cm_listeners() const;

  // True while that process is attached and running.
  bool is_alive(const ProcessRef& process) const;

  // Name of the mailbox segment of a process (for shm_open), for the prefix
  // now in the environment.
  static std::string mailbox_name(const ProcessRef& process);
  // The same for the prefix this registry was attached with: what the wire
  // uses, so a later change of $SOFTVERBS_SHM_PREFIX changes nothing.
  std::string mailbox_name_of(const ProcessRef& process) const;
  // Name of the registry segment for the current prefix and user.
  static std::string segment_name();

  // What reset() did or found.
  struct ResetReport {
    std::string registry;                // its /dev/shm path
    std::vector<std::string> removed;    // paths unlinked
    std::vector<uint32_t> attached_pids;  // processes with a slot in it
  };
  // Removes the registry of this user and prefix, and every mailbox named
  // like its processes', so the next program starts afresh: the way out of
  // a registry from another softverbs version or damaged beyond use
  // (attach's EPROTO). EBUSY, removing nothing, while processes are
  // attached, unless `force` (they keep running but cannot reach programs
  // started afterwards).
  static Errno reset(bool force, ResetReport& report);

  // Removes the registry and mailboxes of every other prefix of this user
  // that no process is attached to any more (all of them ended, even by
  // SIGKILL or _exit()), and returns the paths removed. attach() calls it,
  // so nothing of a dead process outlives the next softverbs process of
  // its user, whatever the prefixes. Registries of another layout version
  // or damaged ones are left to `softverbs reset`.
  static std::vector<std::string> sweep_abandoned(const std::string& own_stem);

  // Far longer than any process holds the registry lock.
  static constexpr std::chrono::milliseconds kLockDeadline{10000};
  // In a child forked from the process that attached: lets go of the
  // child's copies of the descriptor and the mapping (the atfork handler of
  // shm_registry_liveness.cc); the layout reads as empty from then on.
  void let_go_in_child();

  // Tests shorten the wait for the registry lock.
  void set_lock_deadline(std::chrono::milliseconds deadline) { lock_deadline_ = deadline; }

  static constexpr uint32_t kMaxDevices = kMaxRegistryDevices;
  static constexpr uint32_t kMaxProcesses = kMaxProcessSlots;
  // How many QPNs each device can hand out at once.
  static constexpr uint32_t kQpnsPerDevice = kQpnTableSize - kFirstAllocatableQpn;

 private:
  class Lock;
  ShmRegistry(ShmSegment segment, struct stat identity, std::string user_stem);

  RegistryLayout& layout() const { return *layout_; }
  // Reads a slot consistently without the registry lock. false when it is free.
  bool read_slot(uint32_t slot, uint64_t& generation, uint32_t& pid,
                 uint64_t& start_time) const;
  // Liveness (shm_registry_liveness.cc): the record lock this process
  // holds for its slot while it lives, and the test of another slot's.
  Errno hold_liveness_lock(uint32_t slot);
  bool holder_alive(uint32_t slot) const;
  // Kept in a list of the process's registries, so that a forked child
  // closes its copies of their descriptors.
  void enroll();
  void withdraw();
  Errno claim_slot();
  void reclaim_dead_slots_locked();
  void clear_slot_locked(uint32_t slot);
  void detach();

  ShmSegment segment_;
  RegistryLayout* layout_ = nullptr;
  struct stat identity_ {};  // of the segment we attached, for the unlink check
  std::string user_stem_;   // "<prefix>-<euid>-" as it was at attach
  std::string name_;
  ProcessRef self_;
  // A child forked from an attached process inherits this object and the
  // locked descriptor; only the process that attached may detach.
  pid_t attached_pid_ = 0;
  bool left_ = false;  // leave() ran
  // The registry lock's part within this process (shm_registry_access.h),
  // and how long a caller waits for the lock before ETIMEDOUT.
  mutable std::mutex local_lock_;
  std::chrono::milliseconds lock_deadline_{kLockDeadline};
};

}  // namespace softverbs
