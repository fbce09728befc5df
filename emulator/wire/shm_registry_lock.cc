// The registry lock (shm_registry_access.h): a record lock the kernel holds
// for us, and a mutex for the threads of this process.
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <thread>

#include "emulator/wire/shm_registry_access.h"

namespace softverbs {
namespace {

using Clock = std::chrono::steady_clock;

// The first byte of the segment stands for the whole registry.
struct flock registry_range(short type) {
  struct flock range {};
  range.l_type = type;
  range.l_whence = SEEK_SET;
  range.l_start = 0;
  range.l_len = 1;
  return range;
}

// Sleeps between tries, from 10 µs doubling to 2 ms: holders keep the
// lock for microseconds, so the pauses stay short.
class Backoff {
 public:
  void pause() {
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, std::chrono::microseconds(2000));
  }

 private:
  std::chrono::microseconds pause_{10};
};

// Polls for the record lock until `deadline`: a blocking F_OFD_SETLKW could
// not be bounded.
Errno lock_record(int fd, Clock::time_point deadline) {
  struct flock range = registry_range(F_WRLCK);
  Backoff backoff;
  for (;;) {
    if (fcntl(fd, F_OFD_SETLK, &range) == 0) return 0;
    if (errno != EAGAIN && errno != EACCES && errno != EINTR) return errno;
    if (Clock::now() >= deadline) return ETIMEDOUT;
    backoff.pause();
  }
}

// Polls for the threads' mutex the same way. (Not a timed mutex: its timed
// lock is pthread_mutex_clocklock, which ThreadSanitizer does not see, so
// every unlock would look like one of a mutex never locked.)
bool lock_local(std::mutex& mutex, Clock::time_point deadline) {
  Backoff backoff;
  while (!mutex.try_lock()) {
    if (Clock::now() >= deadline) return false;
    backoff.pause();
  }
  return true;
}

}  // namespace

ShmRegistry::Lock::Lock(const ShmRegistry& registry) : registry_(registry) {
  const auto deadline = Clock::now() + registry.lock_deadline_;
  if (!lock_local(registry.local_lock_, deadline)) {
    error_ = ETIMEDOUT;
    return;
  }
  error_ = lock_record(registry.segment_.descriptor(), deadline);
  if (error_ != 0) registry.local_lock_.unlock();
}

ShmRegistry::Lock::~Lock() {
  if (error_ != 0) return;
  struct flock range = registry_range(F_UNLCK);
  fcntl(registry_.segment_.descriptor(), F_OFD_SETLK, &range);
  registry_.local_lock_.unlock();
}

}  // namespace softverbs
