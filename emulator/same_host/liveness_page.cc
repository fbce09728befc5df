#include "emulator/same_host/liveness_page.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace softverbs {

LivenessPage::LivenessPage() {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const int fd = memfd_create("softverbs-live", MFD_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  void* mapped = MAP_FAILED;
  if (fallocate(fd, 0, 0, static_cast<off_t>(page)) == 0 && fstat(fd, &st) == 0)
    mapped = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) {
    close(fd);
    return;
  }
  fd_ = fd;
  inode_ = static_cast<uint64_t>(st.st_ino);
  mutex_ = static_cast<pthread_mutex_t*>(mapped);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(mutex_, &attr);
  pthread_mutexattr_destroy(&attr);
}

LivenessPage::~LivenessPage() {
  if (!mutex_) return;
  munmap(mutex_, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  close(fd_);
}

void LivenessPage::hold() {
  if (mutex_) pthread_mutex_lock(mutex_);
}

void LivenessPage::release() {
  if (mutex_) pthread_mutex_unlock(mutex_);
}

bool holder_alive(const void* page) {
  // The robust futex word: the holder's thread id; FUTEX_OWNER_DIED and no
  // id once the kernel has found the holder dead; 0 when nobody holds it.
  const auto* mutex = static_cast<const pthread_mutex_t*>(page);
  const int word = __atomic_load_n(&mutex->__data.__lock, __ATOMIC_ACQUIRE);
  return (word & FUTEX_TID_MASK) != 0 && (word & FUTEX_OWNER_DIED) == 0;
}

}  // namespace softverbs
