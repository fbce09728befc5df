// Whether the process in a registry slot still runs (shm_registry_layout.h).
//
// Within one PID namespace, pid and start time answer exactly, and a
// forked child that inherited the registry's descriptor does not make a
// dead parent look alive. Across namespaces (containers sharing /dev/shm)
// a pid names nothing here: there, the record lock each process holds on
// its slot's byte answers; the kernel drops it when the process dies.
#include <fcntl.h>

#include <cerrno>

#include "emulator/wire/process_identity.h"
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

}  // namespace

Errno ShmRegistry::hold_liveness_lock(uint32_t slot) {
  struct flock range = liveness_range(slot, F_WRLCK);
  return fcntl(segment_.descriptor(), F_OFD_SETLK, &range) == 0 ? 0 : errno;
}

bool ShmRegistry::holder_alive(uint32_t slot, uint32_t pid, uint64_t start_time,
                               uint64_t pid_namespace) const {
  if (pid_namespace != 0 && pid_namespace == own_pid_namespace_)
    return is_process_alive(static_cast<pid_t>(pid), start_time);
  struct flock range = liveness_range(slot, F_WRLCK);
  if (fcntl(segment_.descriptor(), F_OFD_GETLK, &range) != 0) return true;  // cannot tell
  return range.l_type != F_UNLCK;
}

}  // namespace softverbs
