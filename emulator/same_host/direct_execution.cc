#include "emulator/same_host/direct_execution.h"

#include <sys/uio.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>

#include "emulator/attributes.h"
#include "emulator/memory/app_memory.h"
#include "emulator/packet/headers.h"
#include "emulator/same_host/liveness_page.h"
#include "emulator/same_host/peer_pages.h"
#include "emulator/same_host/target_entry_access.h"
#include "emulator/same_host/target_table_layout.h"
#include "emulator/sync/shared_lock_word.h"
#include "emulator/wire/futex.h"

namespace softverbs {
namespace {

using target_entry_access::lock_entry;
using target_entry_access::target_pid;
using target_entry_access::Unlocker;


// The atomic `op` on the word at `address`, mapped here, with the
// processor's atomic instructions: the target's responder and its own CPU
// reach the same physical word, so the atomic holds against them too.
bool operate_on_word(uint8_t* address, const DirectOperation& op) {
  if (reinterpret_cast<uintptr_t>(address) % sizeof(uint64_t)) return false;
  auto* word = reinterpret_cast<uint64_t*>(address);
  switch (op.kind) {
    case DirectKind::kCompareSwap:
      return app_memory::compare_swap(word, op.compare_add, op.swap, *op.original);
    case DirectKind::kFetchAdd: return app_memory::fetch_add(word, op.compare_add, *op.original);
    case DirectKind::kAtomicWrite: return app_memory::store(word, op.compare_add);
    default: return false;
  }
}

// A copy per local piece to or from `there`, mapped here (the target's own
// memory when it is this process, or its shared pages), each guarded on
// both sides.
bool copy_pieces(const DirectOperation& op, uint8_t* there) {
  for (const RunPiece& p : op.local) {
    auto* here = reinterpret_cast<void*>(p.addr);
    if (!(op.reads_target() ? app_memory::copy(here, there, p.length)
                            : app_memory::copy(there, here, p.length)))
      return false;
    there += p.length;
  }
  return true;
}

// The move itself, to or from `there` mapped here (`op` checked): its
// bytes, or its atomic on the word.
bool move_here(const DirectOperation& op, uint8_t* there) {
  return op.is_atomic() ? operate_on_word(there, op) : copy_pieces(op, there);
}

// The bytes with one system call for the whole message. false when
// anything did not move; `refused` when the kernel forbids it outright.
bool move_by_system_call(uint32_t pid, const DirectOperation& op, uint64_t remote,
                         bool& refused) {
  std::array<iovec, kMaxSge> local;
  size_t n = 0;
  for (const RunPiece& p : op.local) {
    if (n == local.size()) return false;
    local[n++] = iovec{reinterpret_cast<void*>(p.addr), static_cast<size_t>(p.length)};
  }
  iovec far{reinterpret_cast<void*>(remote), static_cast<size_t>(op.length)};
  const ssize_t moved =
      op.reads_target() ? process_vm_readv(static_cast<pid_t>(pid), local.data(), n, &far, 1, 0)
                        : process_vm_writev(static_cast<pid_t>(pid), local.data(), n, &far, 1, 0);
  refused = moved < 0 && (errno == EPERM || errno == ENOSYS);
  return moved >= 0 && static_cast<uint64_t>(moved) == op.length;
}

// Whether the target lives, by its liveness page: its shared pages outlive
// it, where a system call to it would fail.
bool owner_alive(TargetTableHeader& header, uint32_t pid) {
  const uint64_t inode = shared_field(header.liveness_inode).load(std::memory_order_relaxed);
  if (inode == 0) return false;
  const int32_t fd = shared_field(header.liveness_fd).load(std::memory_order_relaxed);
  const std::shared_ptr<const PeerMapping> page =
      PeerPages::process().find(pid, fd, inode, PeerFile::kLiveness);
  return page && holder_alive(page->base);
}

// The right the QP and the MR must grant, as the responder asks it (an
// ATOMIC WRITE is placed with a WRITE's rights).
uint32_t access_needed(DirectKind kind) {
  switch (kind) {
    case DirectKind::kRead: return kAccessRemoteRead;
    case DirectKind::kCompareSwap:
    case DirectKind::kFetchAdd: return kAccessRemoteAtomic;
    default: return kAccessRemoteWrite;
  }
}

// Asks the owner to share the MR's pages (deferred_sharing.h), once per
// entry: the first ask wakes its sharing thread; the ones after cost a load.
void ask_for_pages(TargetTableHeader& header, TargetMrEntry& entry) {
  if (shared_field(entry.pages_wanted).load(std::memory_order_relaxed) != 0) return;
  if (shared_field(entry.pages_wanted).exchange(1, std::memory_order_relaxed) != 0) return;
  std::atomic<uint32_t>& calls = pages_wanted_calls(header);
  calls.fetch_add(1, std::memory_order_release);
  futex_wake_shared(calls, 1);
}

DirectResult executed_if(bool done) {
  return done ? DirectResult::kExecuted : DirectResult::kNotHere;
}

// Moves the bytes of `op` into or out of the MR `mr` (checked; `entry`
// its locked entry) of `pid`, or runs its atomic there.
DirectResult move_bytes(TargetTableLayout& table, uint32_t pid, const DirectOperation& op,
                        const TargetMrEntry& mr, TargetMrEntry& entry) {
  const uint64_t within = op.va - mr.iova;
  if (op.same_process)
    return executed_if(move_here(op, reinterpret_cast<uint8_t*>(mr.host_address + within)));
  if (mr.pages_inode != 0 && mr.pages_offset <= UINT64_MAX - within &&
      owner_alive(table.header, pid)) {
    const std::shared_ptr<const PeerMapping> pages = PeerPages::process().find(
        pid, mr.pages_fd, mr.pages_inode,
        op.reads_target() ? PeerFile::kMrPagesReadOnly : PeerFile::kMrPages);
    if (pages) {
      const uint64_t offset = mr.pages_offset + within;
      if (offset > pages->size || op.length > pages->size - offset) return DirectResult::kNotHere;
      return executed_if(move_here(op, pages->base + offset));
    }
  }
  if (mr.pages_inode == 0) ask_for_pages(table.header, entry);
  // No system call is atomic against the target's CPU.
  if (op.only_without_system_call || op.is_atomic()) return DirectResult::kNeedsSystemCall;
  bool refused = false;
  if (move_by_system_call(pid, op, mr.host_address + within, refused))
    return DirectResult::kExecuted;
  return refused ? DirectResult::kRefused : DirectResult::kNotHere;
}

}  // namespace

DirectResult execute_directly(std::span<uint8_t> area, const DirectOperation& op) {
  if (area.size() < sizeof(TargetTableLayout)) return DirectResult::kNotHere;
  auto& table = *reinterpret_cast<TargetTableLayout*>(area.data());
  const uint32_t pid = target_pid(table);
  if (pid == 0) return DirectResult::kNotHere;
  const uint32_t access = access_needed(op.kind);
  // IBTA 9.4.5: an atomic addresses an aligned 64-bit word.
  if (op.is_atomic() && (op.va % sizeof(uint64_t) || op.length != sizeof(uint64_t)))
    return DirectResult::kNotHere;
  const uint64_t seed = shared_field(table.header.seed).load(std::memory_order_relaxed);

  TargetQpEntry qp_seen;
  TargetQpEntry* qp = lock_entry(
      table.qps, target_qp_key(op.device_index, op.qpn), qp_seen, [&](const TargetQpEntry& e) {
        return sealed(e, seed) && e.open == 1 && e.peer_key == op.initiator_key &&
               e.expected_psn == op.psn && (e.access_flags & access) == access;
      });
  Unlocker<TargetQpEntry> qp_unlock{qp};
  if (!qp) return DirectResult::kNotHere;
  // SENDs placed before it and not yet taken by the owner come first: as
  // packets it queues behind them.
  TargetQpReceives& receives = table.receives[qp - table.qps];
  if (shared_field(qp->sends_placed).load(std::memory_order_relaxed) !=
      shared_field(receives.sends_taken).load(std::memory_order_acquire))
    return DirectResult::kNotYet;

  if (op.length != 0) {  // zero-length accesses name no memory (IBTA 9.4.4)
    TargetMrEntry mr_seen;
    TargetMrEntry* mr = lock_entry(table.mrs, op.rkey, mr_seen, [&](const TargetMrEntry& e) {
      return sealed(e, seed) && e.device == op.device_index + 1 && e.pd == qp_seen.pd &&
             (e.access & access) == access &&
             op.va >= e.iova && op.length <= e.length && op.va - e.iova <= e.length - op.length;
    });
    Unlocker<TargetMrEntry> mr_unlock{mr};
    if (!mr) return DirectResult::kNotHere;
    const DirectResult moved = move_bytes(table, pid, op, mr_seen, *mr);
    if (moved != DirectResult::kExecuted) return moved;
  }
  if (op.place_only) return DirectResult::kExecuted;
  target_entry_access::advance_past_message(*qp, qp_seen, op.psn, op.packets, seed);
  return DirectResult::kExecuted;
}

}  // namespace softverbs
