// How the registry's own code touches the shared segment: its robust mutex,
// and atomic access to fields that other processes write. Private to
// shm_registry*.cc, which share it because the registry's tables live in
// more than one file.
#pragma once

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cerrno>

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

// The registry mutex, robust: if a process died holding it, the next locker
// gets it (EOWNERDEAD) and marks it consistent; the update order described
// in shm_registry_layout.h makes whatever the dead process left harmless.
// The wait is bounded: a mutex word scribbled on by a broken peer makes
// registry calls fail with ETIMEDOUT instead of hanging.
class ShmRegistry::Lock {
 public:
  // Far longer than any holder keeps the registry mutex.
  static constexpr time_t kDeadlineSeconds = 10;

  explicit Lock(pthread_mutex_t& mutex) : mutex_(mutex) {
    // timedlock (CLOCK_REALTIME) rather than clocklock: ThreadSanitizer
    // knows only the former, and a clock step merely stretches the bound.
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += kDeadlineSeconds;
    int rc = pthread_mutex_timedlock(&mutex_, &deadline);
    if (rc == EOWNERDEAD) rc = pthread_mutex_consistent(&mutex_);
    error_ = rc;
  }
  ~Lock() {
    if (error_ == 0) pthread_mutex_unlock(&mutex_);
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;
  Errno error() const { return error_; }

 private:
  pthread_mutex_t& mutex_;
  Errno error_ = 0;
};

}  // namespace softverbs
