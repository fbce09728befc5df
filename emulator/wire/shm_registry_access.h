// How the registry's own code touches the shared segment: its lock, and
// atomic access to fields that other processes write. Private to
// shm_registry*.cc, which share it because the registry's tables live in
// more than one file.
#pragma once

#include <atomic>
#include <cerrno>
#include <string>
#include <vector>

#include "emulator/wire/shm_registry.h"

namespace softverbs {

template <typename T>
std::atomic_ref<T> shared(T& field) {
  return std::atomic_ref<T>(field);
}

template <typename T>
T load_shared(const T& field) {
  return std::atomic_ref<T>(const_cast<T&>(field)).load(std::memory_order_seq_cst);
}

// Unlinks every "<stem>mbox-<slot>-<generation>" segment and returns their
// names. Only called while no process can be attached (segment just
// created, or exclusively locked by the last user), when no such segment can
// be in use, or by a forced reset.
std::vector<std::string> remove_stray_mailboxes(const std::string& user_stem);

// The registry lock. An open-file-description record lock (F_OFD_SETLK) on
// the registry segment, so the kernel releases it when its holder dies and
// nothing written into shared memory can corrupt it (the update order in
// shm_registry_layout.h makes whatever a dead holder left harmless); plus a
// mutex of this process, since the record lock is one for every thread
// that uses the same descriptor. The wait is bounded: a holder that stopped
// (SIGSTOP, a debugger) makes registry calls fail with ETIMEDOUT instead of
// hanging (shm_registry_lock.cc).
class ShmRegistry::Lock {
 public:
  explicit Lock(const ShmRegistry& registry);
  ~Lock();
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
  Errno error() const { return error_; }

 private:
  const ShmRegistry& registry_;
  Errno error_ = 0;
};

}  // namespace softverbs
