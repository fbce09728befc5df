// An initiator's access to a target's table (target_table_layout.h): whether
// the table takes operations now, and its entries found and locked briefly,
// every decision taken on a private snapshot. Shared by the operations an
// initiator executes there (direct_execution.h) and the SENDs it places
// (placed_send.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "emulator/same_host/target_table_layout.h"
#include "emulator/sync/shared_lock_word.h"

namespace softverbs::target_entry_access {

// An initiator never waits long for an entry: a held one sends the
// operation as packets.
inline constexpr uint32_t kLockSpins = 256;

// The target's pid when its table is whole, takes operations, and lives in
// this pid namespace; 0 otherwise.
inline uint32_t target_pid(TargetTableLayout& t) {
  TargetTableHeader& h = t.header;
  if (shared_field(h.magic).load(std::memory_order_acquire) != kTargetTableMagic) return 0;
  if (shared_field(h.version).load(std::memory_order_relaxed) != kTargetTableVersion) return 0;
  if (shared_field(h.accepting).load(std::memory_order_acquire) == 0) return 0;
  const uint64_t ns = shared_field(h.pid_namespace).load(std::memory_order_relaxed);
  if (ns == 0 || ns != own_pid_namespace()) return 0;
  return shared_field(h.pid).load(std::memory_order_relaxed);
}

// Finds and locks the entry holding `key` whose snapshot `seen` satisfies
// `also`; every decision is taken on `seen`, never on the shared entry.
template <typename Entry, size_t N, typename Also>
Entry* lock_entry(Entry (&entries)[N], uint32_t key, Entry& seen, Also&& also) {
  const uint32_t start = target_probe_start(key, N);
  for (uint32_t i = 0; i < kTargetProbeLength; ++i) {
    Entry& e = entries[(start + i) % N];
    if (shared_field(e.key).load(std::memory_order_relaxed) != key) continue;
    if (!shared_lock_word::try_lock(e.lock, kLockSpins)) return nullptr;
    seen = snapshot(e);
    if (seen.key == key && also(seen)) return &e;
    shared_lock_word::unlock(e.lock);
  }
  return nullptr;
}

// Releases a locked entry on every way out.
template <typename Entry>
struct Unlocker {
  Entry* e;
  ~Unlocker() {
    if (e) shared_lock_word::unlock(e->lock);
  }
};

// The QP entry `qp` (locked; `seen` its snapshot) moved past a message of
// `packets` PSNs from `psn`, written from the snapshot and sealed over it:
// anything scribbled since leaves the entry unusable rather than sealed.
// `executed`: counted among the operations executed on it.
inline void advance_past_message(TargetQpEntry& qp, TargetQpEntry& seen, uint32_t psn,
                                 uint32_t packets, uint64_t seed, bool executed = true) {
  seen.expected_psn = (psn + packets) & 0xffffff;
  ++seen.msn;
  qp.expected_psn = seen.expected_psn;
  qp.msn = seen.msn;
  qp.seal = seal_of(seen, seed);
  // Read without the lock by the owner's stats.
  if (executed) shared_field(qp.executed).store(qp.executed + 1, std::memory_order_relaxed);
}

}  // namespace softverbs::target_entry_access
