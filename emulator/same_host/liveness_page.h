// A process's liveness, readable by its peers with one load: a page of its
// own (a memfd) holding a robust mutex that a thread of the process holds
// for as long as it serves initiators. When the process dies (or execs),
// the kernel marks the mutex's futex word FUTEX_OWNER_DIED.
//
// Initiators that write into the process's shared MR pages (shared_pages.h)
// need it: those pages outlive their owner, where a system call to a dead
// process fails. Peers map the page read-only (peer_pages.h), so that no
// stray write of theirs reaches the mutex, whose robust-list links glibc
// and the kernel follow in the owner.
#pragma once

#include <pthread.h>

#include <cstdint>

namespace softverbs {

class LivenessPage {
 public:
  // Makes the page; valid() is false when it could not be.
  LivenessPage();
  ~LivenessPage();
  LivenessPage(const LivenessPage&) = delete;
  LivenessPage& operator=(const LivenessPage&) = delete;

  bool valid() const { return mutex_ != nullptr; }
  int32_t fd() const { return fd_; }        // to publish, with the inode
  uint64_t inode() const { return inode_; }

  // The calling thread holds the mutex until it releases it, from the same
  // thread; it must live that long.
  void hold();
  void release();

 private:
  int32_t fd_ = -1;
  uint64_t inode_ = 0;
  pthread_mutex_t* mutex_ = nullptr;  // at the start of the page
};

// What a peer's mapping of the page says: whether a thread holds the mutex
// and has not died.
bool holder_alive(const void* page);

}  // namespace softverbs
