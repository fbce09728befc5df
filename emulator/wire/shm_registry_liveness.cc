// Whether the process in a registry slot still runs (shm_registry_layout.h):
// it holds a record lock on its slot's byte of the segment while it lives,
// and the kernel drops the lock when it dies. This holds across PID
// namespaces (containers sharing /dev/shm), where a pid names another
// process or none, and needs one fcntl, not a read of /proc.
//
// The lock belongs to the registry's open file description, which a child
// forked without exec shares through its copies of the descriptor and of
// the mapping: the child lets go of both at once (the mapping becomes
// private memory), so a dead parent does not look alive, nor attached, for
// as long as its children run.
#include <fcntl.h>
#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <vector>

#include "emulator/wire/shm_registry.h"

namespace softverbs {
namespace {

struct flock liveness_range(uint32_t slot, short type) {
  struct flock range {};
  range.l_type = type;
  range.l_whence = SEEK_SET;
  range.l_start = kLivenessLockBase + slot;
  range.l_len = 1;
  return range;
}

// The registries of this process; never destroyed (atfork handlers outlive
// static destruction).
std::mutex& registries_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::vector<ShmRegistry*>& registries() {
  static auto* list = new std::vector<ShmRegistry*>;
  return *list;
}

void before_fork() { registries_mutex().lock(); }
void after_fork_in_parent() { registries_mutex().unlock(); }
void after_fork_in_child() {
  for (ShmRegistry* registry : registries()) registry->let_go_in_child();
  registries_mutex().unlock();
}

}  // namespace

void ShmRegistry::enroll() {
  static std::once_flag handlers;
  std::call_once(handlers,
                 [] { pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); });
  std::lock_guard lock(registries_mutex());
  registries().push_back(this);
}

void ShmRegistry::withdraw() {
  std::lock_guard lock(registries_mutex());
  std::erase(registries(), this);
}

void ShmRegistry::let_go_in_child() { segment_.forget_file(); }

Errno ShmRegistry::hold_liveness_lock(uint32_t slot) {
  struct flock range = liveness_range(slot, F_WRLCK);
  return fcntl(segment_.descriptor(), F_OFD_SETLK, &range) == 0 ? 0 : errno;
}

bool ShmRegistry::holder_alive(uint32_t slot) const {
  struct flock range = liveness_range(slot, F_WRLCK);
  if (fcntl(segment_.descriptor(), F_OFD_GETLK, &range) != 0) return true;  // cannot tell
  return range.l_type != F_UNLCK;
}

}  // namespace softverbs
