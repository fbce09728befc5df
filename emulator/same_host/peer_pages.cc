#include "emulator/same_host/peer_pages.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace softverbs {
namespace {

// By system call numbers: glibc 2.36's <sys/pidfd.h> declares them without C linkage.
int open_pidfd(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }
int fetch_fd(int pidfd, int fd) { return static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0)); }

// Whether `file` is a memfd of that kind, by the name it was made with.
bool named(int file, PeerFile kind) {
  const char* expected =
      kind == PeerFile::kLiveness ? "/memfd:softverbs-live " : "/memfd:softverbs-mr ";
  char link[64];
  char target[128] = {};
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", file);
  const ssize_t n = readlink(link, target, sizeof(target) - 1);
  return n > 0 && std::strncmp(target, expected, std::strlen(expected)) == 0;
}

}  // namespace

PeerMapping::~PeerMapping() {
  if (base) munmap(base, size);
}

std::atomic<PeerPages*> PeerPages::created{nullptr};

PeerPages& PeerPages::process() {
  static PeerPages* pages = [] {
    auto* made = new PeerPages;  // lives as long as the process
    // Held across fork(), so that the child's copy is not left locked; the
    // child has none of the mappings (MADV_DONTFORK) and forgets them.
    pthread_atfork([] { process().mutex_.lock(); }, [] { process().mutex_.unlock(); },
                   [] {
                     process().mutex_.unlock();
                     process().forget_all();
                   });
    created.store(made, std::memory_order_release);
    return made;
  }();
  return *pages;
}

namespace {

// The mapping of each kind this thread found last: the next operation
// usually wants the same one, and takes it without the mutex. Weak: a
// thread that stops asking must not keep a mapping alive.
thread_local std::weak_ptr<const PeerMapping> recently_found[kPeerFileKinds];

std::weak_ptr<const PeerMapping>& recent(PeerFile kind) {
  return recently_found[static_cast<size_t>(kind)];
}

// Whether process `pid` still holds the file `inode` under descriptor
// `fd`; true when that cannot be told (the peer's /proc is not ours to
// read), so the mapping stays as before.
bool owner_holds(uint32_t pid, int32_t fd, uint64_t inode) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%u/fd/%d", pid, fd);
  struct stat st;
  if (stat(path, &st) == 0) return static_cast<uint64_t>(st.st_ino) == inode;
  return !(errno == ENOENT || errno == ESRCH);
}

}  // namespace

std::shared_ptr<const PeerMapping> PeerPages::find(uint32_t pid, int32_t fd, uint64_t inode,
                                                    PeerFile kind) {
  std::weak_ptr<const PeerMapping>& recent_one = recent(kind);
  if (std::shared_ptr<const PeerMapping> last = recent_one.lock();
      last && last->inode == inode && last->pid == pid && last->kind == kind)
    return last;
  std::shared_ptr<const PeerMapping> found = find_locked(pid, fd, inode, kind);
  if (found) recent_one = found;
  return found;
}

void PeerPages::tidy() {
  // Nothing to do in a process that never mapped a peer's pages.
  PeerPages* pages = created.load(std::memory_order_acquire);
  if (pages) pages->tidy_now_and_then();
}

void PeerPages::tidy_now_and_then() {
  if (!any_held_.load(std::memory_order_relaxed)) return;
  timespec now;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  const uint64_t now_ns = static_cast<uint64_t>(now.tv_sec) * 1'000'000'000 +
                          static_cast<uint64_t>(now.tv_nsec);
  uint64_t due = next_tidy_ns_.load(std::memory_order_relaxed);
  if (now_ns < due) return;
  // One thread tidies per interval.
  if (!next_tidy_ns_.compare_exchange_strong(due, now_ns + kTidyIntervalNs,
                                             std::memory_order_relaxed))
    return;
  // Never waits: the caller is a progress thread, which fork() may be
  // waiting for to park while it holds this mutex (pthread_atfork above).
  std::unique_lock lock(mutex_, std::try_to_lock);
  if (lock.owns_lock()) let_go_of_released_locked();
}

size_t PeerPages::let_go_of_released() {
  std::lock_guard lock(mutex_);
  return let_go_of_released_locked();
}

size_t PeerPages::let_go_of_released_locked() {
  const size_t before = mappings_.size();
  // Unmapped once no copy holds them.
  std::erase_if(mappings_, [](const std::shared_ptr<PeerMapping>& m) {
    return !owner_holds(m->pid, m->fd, m->inode);
  });
  any_held_.store(!mappings_.empty(), std::memory_order_relaxed);
  return before - mappings_.size();
}

size_t PeerPages::held() {
  std::lock_guard lock(mutex_);
  return mappings_.size();
}

std::shared_ptr<const PeerMapping> PeerPages::find_locked(uint32_t pid, int32_t fd,
                                                          uint64_t inode, PeerFile kind) {
  std::lock_guard lock(mutex_);
  ++uses_;
  for (const std::shared_ptr<PeerMapping>& m : mappings_) {
    if (m->inode != inode || m->pid != pid || m->kind != kind) continue;
    m->last_used = uses_;
    return m->base ? m : nullptr;
  }
  if (mappings_.size() >= kMostMappings) {
    auto oldest = std::min_element(mappings_.begin(), mappings_.end(), [](auto& a, auto& b) {
      return a->last_used < b->last_used;
    });
    mappings_.erase(oldest);  // unmapped once no copy holds it
  }
  std::shared_ptr<PeerMapping> made = map(pid, fd, inode, kind);
  made->last_used = uses_;
  mappings_.push_back(made);
  any_held_.store(true, std::memory_order_relaxed);
  return made->base ? made : nullptr;
}

std::shared_ptr<PeerMapping> PeerPages::map(uint32_t pid, int32_t fd, uint64_t inode,
                                            PeerFile kind) {
  auto m = std::make_shared<PeerMapping>();
  m->pid = pid;
  m->fd = fd;
  m->inode = inode;
  m->kind = kind;
  const int pidfd = open_pidfd(static_cast<pid_t>(pid));
  if (pidfd < 0) return m;
  const int file = fetch_fd(pidfd, fd);
  close(pidfd);
  if (file < 0) return m;
  struct stat st;
  if (fstat(file, &st) == 0 && static_cast<uint64_t>(st.st_ino) == inode && st.st_size > 0 &&
      S_ISREG(st.st_mode) && named(file, kind)) {
    const auto size = static_cast<uint64_t>(st.st_size);
    const int prot = kind == PeerFile::kMrPages ? PROT_READ | PROT_WRITE : PROT_READ;
    void* base = mmap(nullptr, size, prot, MAP_SHARED, file, 0);
    if (base != MAP_FAILED) {
      madvise(base, size, MADV_DONTFORK);
      m->base = static_cast<uint8_t*>(base);
      m->size = size;
    }
  }
  close(file);
  return m;
}

void PeerPages::forget_all() {
  // The mappings are not there, so nothing is unmapped.
  for (std::shared_ptr<PeerMapping>& m : mappings_) m->base = nullptr;
  mappings_.clear();
  any_held_.store(false, std::memory_order_relaxed);
  // This thread's (the only one in the child) too.
  for (std::weak_ptr<const PeerMapping>& m : recently_found) m.reset();
}

}  // namespace softverbs
