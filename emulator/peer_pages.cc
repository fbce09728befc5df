#include "emulator/peer_pages.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
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
      kind == PeerFile::kMrPages ? "/memfd:softverbs-mr " : "/memfd:softverbs-live ";
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
    return made;
  }();
  return *pages;
}

namespace {

// The mapping of each kind this thread found last: the next operation
// usually wants the same one, and takes it without the mutex.
thread_local std::shared_ptr<const PeerMapping> recently_found[2];

std::shared_ptr<const PeerMapping>& recent(PeerFile kind) {
  return recently_found[static_cast<size_t>(kind)];
}

}  // namespace

std::shared_ptr<const PeerMapping> PeerPages::find(uint32_t pid, int32_t fd, uint64_t inode,
                                                    PeerFile kind) {
  std::shared_ptr<const PeerMapping>& last = recent(kind);
  if (last && last->inode == inode && last->pid == pid) return last;
  std::shared_ptr<const PeerMapping> found = find_locked(pid, fd, inode, kind);
  if (found) last = found;
  return found;
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
  return made->base ? made : nullptr;
}

std::shared_ptr<PeerMapping> PeerPages::map(uint32_t pid, int32_t fd, uint64_t inode,
                                            PeerFile kind) {
  auto m = std::make_shared<PeerMapping>();
  m->pid = pid;
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
  // This thread's (the only one in the child) too.
  for (std::shared_ptr<const PeerMapping>& m : recently_found) m.reset();
}

}  // namespace softverbs
