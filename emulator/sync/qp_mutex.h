// The lock of one QP. It counts the QP locks the calling thread holds, so
// that frames this thread sent to QPs of its own process are delivered the
// moment it holds none (local_delivery.h): delivering one takes the
// receiving QP's lock, which must never be taken while another QP's is held.
//
// Meets Lockable, so std::lock_guard and std::unique_lock take it.
#pragma once

#include <cstdint>
#include <mutex>

#include "emulator/same_host/local_delivery.h"

namespace softverbs {

class QpMutex {
 public:
  void lock() {
    mutex_.lock();
    ++held_by_this_thread_;
  }
  bool try_lock() {
    if (!mutex_.try_lock()) return false;
    ++held_by_this_thread_;
    return true;
  }
  void unlock() {
    mutex_.unlock();
    if (--held_by_this_thread_ == 0) LocalDelivery::deliver_kept();
  }

  // Whether the calling thread holds any QP's lock.
  static bool any_held() { return held_by_this_thread_ != 0; }

 private:
  std::mutex mutex_;
  // initial-exec: one load from the thread pointer on every lock, not a call
  // into the dynamic linker (this code runs in a shared library).
  [[gnu::tls_model("initial-exec")]] static inline thread_local uint32_t held_by_this_thread_ = 0;
};

}  // namespace softverbs
