// The target table: what a process publishes in its target area (the end of
// its mailbox segment, which every peer on the host maps) so that an
// initiator can execute an RDMA WRITE or READ on it without it, as an HCA
// does: the RC QPs that may take such an operation now, each with its
// responder's position (expected PSN, MSN) and rights, and the MRs that
// R_Keys name. direct_execution.h is the initiator's side, target_table.h
// the owner's.
//
// Every entry has a lock word (shared_lock_word.h): the owner takes it to
// change the entry, an initiator to use it, so an operation sees the entry
// before or after a change, and a deregistration waits for an operation in
// progress. Keys and fields are plain integers read through std::atomic_ref
// or under the lock; any process of the user can write here, so an
// initiator checks everything it reads and never waits on it for long.
// Each entry is sealed: a hash of its fields keyed by the table's seed,
// redone by whoever changes it, so that bytes scribbled over an entry
// (a stray write of a buggy process) make it unusable instead of sending
// an initiator's bytes to a wrong address. It is no defence against a
// process that forges entries on purpose: a process of the same user that
// may do that may also write into the target's memory itself.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "emulator/wire/shm_mailbox_layout.h"

namespace softverbs {

inline constexpr uint64_t kTargetTableMagic = 0x746774742d767373ull;  // "ssv-ttgt"
// 4: lock words hold the holder's pid and bits of its start time.
// 5: initiators ask for an MR's pages to be shared (pages_wanted).
// 6: initiators place SENDs (placed_send.h): QP entries say what a SEND
// may be and how many the initiator placed; receive counts beside them.
inline constexpr uint32_t kTargetTableVersion = 6;

struct TargetTableHeader {
  uint64_t magic;               // written last, read with acquire
  uint32_t version;
  uint32_t pid;                 // the owner, as its pid namespace names it
  uint64_t pid_namespace;       // inode of the owner's /proc/self/ns/pid
  uint32_t accepting;           // 0 while every packet must travel (faults, capture)
  // Bumped, and woken as a futex, by an initiator that set an MR entry's
  // pages_wanted: the owner's deferred sharing sleeps on it.
  uint32_t pages_wanted_calls;
  uint64_t seed;                // keys the entries' seals
  // The owner's liveness page (liveness_page.h), when it shares MR pages:
  // its descriptor in the owner and its inode (0: none).
  int32_t liveness_fd;
  // 1 while every SEND must reach the owner's responder (softverbs rnr
  // forces RNR NAKs): no SEND is placed (placed_send.h).
  uint32_t sends_refused;
  uint64_t liveness_inode;
};

// An RC QP of the owner. key: 0 empty, else target_qp_key(device, qpn).
struct alignas(64) TargetQpEntry {
  uint32_t lock;
  uint32_t key;
  // Under the lock:
  uint32_t open;                // 1: an initiator may execute on it now
  uint32_t expected_psn;
  uint32_t msn;
  uint32_t access_flags;        // the QP's remote access bits
  uint32_t peer_key;            // target_qp_key() of the connected peer QP
  // The longest SEND an initiator may place (placed_send.h): what the
  // shortest receive WQE posted since the QP's reset takes.
  uint32_t send_max;
  uint64_t pd;                  // names the QP's PD within the owner
  // Names the QP's life since its creation or last reset: a placed SEND
  // carries it, and one from an earlier life is dropped.
  uint32_t generation;
  uint32_t takes_sends;         // 1: SENDs may be placed (not with an SRQ)
  uint64_t seal;                // of everything above but the lock
  // Not sealed:
  uint32_t executed;            // operations initiators executed on it, wrapping
  uint32_t sends_placed;        // SENDs initiators placed since the reset, wrapping
};

// Beside each QP entry, in a table of their own that only the owner writes
// (without the lock, with release stores; four to a line, to keep the
// mailbox within its size): its receive queue as placed
// SENDs see it. Counts since the reset, wrapping. A placed SEND may take a
// receive while posted - taken_by_packets exceeds the entry's
// sends_placed; both only grow, so an initiator may keep what it read of
// `posted` (a view too low holds SENDs back, never too many), and reads
// taken_by_packets again only after sending receive-taking packets itself
// (no one else's take one).
struct alignas(16) TargetQpReceives {
  uint32_t posted;            // receive WQEs posted
  uint32_t taken_by_packets;  // of those, taken by packets (or flushed)
  // Placed SENDs the owner has taken: while fewer than sends_placed, a
  // WRITE, READ or atomic goes as packets, behind them.
  uint32_t sends_taken;
  uint32_t reserved;
};

// An MR with an R_Key. key: 0 empty, else the R_Key; device 1-based.
// pages_inode 0: its pages are the owner's own (reached by system calls);
// else they lie in a file the owner shares (shared_pages.h). pages_wanted
// (not sealed, set by initiators): an initiator of another process reached
// the MR while its pages were the owner's own; the owner may share them
// then (deferred_sharing.h).
struct alignas(64) TargetMrEntry {
  uint32_t lock;
  uint32_t key;
  // Under the lock:
  uint32_t device;
  uint32_t access;
  uint64_t pd;
  uint64_t iova;
  uint64_t length;
  uint64_t host_address;        // of iova, in the owner's address space
  int32_t pages_fd;             // the file's descriptor in the owner
  uint32_t pages_wanted;
  uint64_t pages_inode;
  uint64_t pages_offset;        // of iova, in the file
  uint64_t seal;                // of everything above but the lock
};

inline constexpr uint32_t kTargetQpEntries = 512;
inline constexpr uint32_t kTargetMrEntries = 512;
// A key is looked for in this many entries from where it hashes to.
inline constexpr uint32_t kTargetProbeLength = 16;

struct TargetTableLayout {
  alignas(64) TargetTableHeader header;
  TargetQpEntry qps[kTargetQpEntries];
  TargetMrEntry mrs[kTargetMrEntries];
  TargetQpReceives receives[kTargetQpEntries];  // receives[i] is qps[i]'s
};
static_assert(sizeof(TargetQpEntry) == 64 && sizeof(TargetMrEntry) == 128 &&
              sizeof(TargetQpReceives) == 16);
static_assert(sizeof(TargetTableLayout) <= kMailboxTargetAreaBytes);
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);

// QPNs are 24 bits and devices fewer than 255: never 0.
constexpr uint32_t target_qp_key(uint32_t device_index, uint32_t qpn) {
  return ((device_index + 1) << 24) | (qpn & 0xffffff);
}

constexpr uint32_t target_probe_start(uint32_t key, uint32_t entries) {
  return (key * 2654435761u) % entries;
}

// A field of the table read or written outside its entry's lock.
template <typename T>
std::atomic_ref<T> shared_field(T& field) {
  return std::atomic_ref<T>(field);
}

// The header's pages_wanted_calls as the futex word both sides use.
inline std::atomic<uint32_t>& pages_wanted_calls(TargetTableHeader& header) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return *reinterpret_cast<std::atomic<uint32_t>*>(&header.pages_wanted_calls);
}

// An entry's sealed fields and seal, read once (under its lock) into
// private memory, where a stray write cannot change them between a check
// and a use. The lock word and the unsealed counts stay behind.
TargetQpEntry snapshot(const TargetQpEntry& e);
TargetMrEntry snapshot(const TargetMrEntry& e);

// The seals (under the entry's lock, or of a snapshot).
uint64_t seal_of(const TargetQpEntry& e, uint64_t seed);
uint64_t seal_of(const TargetMrEntry& e, uint64_t seed);
inline void reseal(TargetQpEntry& e, uint64_t seed) { e.seal = seal_of(e, seed); }
inline void reseal(TargetMrEntry& e, uint64_t seed) { e.seal = seal_of(e, seed); }
inline bool sealed(const TargetQpEntry& e, uint64_t seed) { return e.seal == seal_of(e, seed); }
inline bool sealed(const TargetMrEntry& e, uint64_t seed) { return e.seal == seal_of(e, seed); }

// What a table's header names as its owner's pid namespace, for this
// process (the inode of /proc/self/ns/pid; 0 when unknown).
uint64_t own_pid_namespace();

}  // namespace softverbs
