#include "provider/rdmacm/cm_file_table.h"

#include <sys/eventfd.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>

#include "provider/rdmacm/cm_file.h"

namespace softverbs::provider {
namespace {

// A bit per fd below this says "maybe ours", so the question costs one load
// for every other fd; descriptors above it are looked up in the map alone.
constexpr int kFlaggedFds = 4096;

struct Table {
  std::mutex mutex;
  std::map<int, std::shared_ptr<CmFile>> files;
  std::atomic<bool> flagged[kFlaggedFds] = {};
  // The fd was an rdma_cm file until it was closed (and is none now).
  std::atomic<bool> closed[kFlaggedFds] = {};
  std::atomic<bool> any_high{false};
};

Table& table() {
  // Never destroyed: write(2) and close(2) may come from static destructors.
  static Table* instance = new Table;
  return *instance;
}

// Whether `fd` may be an rdma_cm file: one atomic load for low fds.
bool maybe_ours(Table& t, int fd) {
  if (fd < 0) return false;
  return fd < kFlaggedFds ? t.flagged[fd].load(std::memory_order_acquire)
                          : t.any_high.load(std::memory_order_acquire);
}

}  // namespace

int open_cm_file(int flags) {
  int event_flags = 0;
  if (flags & O_CLOEXEC) event_flags |= EFD_CLOEXEC;
  if (flags & O_NONBLOCK) event_flags |= EFD_NONBLOCK;
  // The process's connection manager serves every file: made with the
  // first, so that no command races to make it.
  Errno err = 0;
  cm::ConnectionManager* manager = cm::ConnectionManager::process(err);
  if (!manager) {
    errno = err ? err : ENODEV;
    return -1;
  }
  const int fd = ::eventfd(0, event_flags);
  if (fd < 0) return -1;
  auto file = std::make_shared<CmFile>(fd, *manager);
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.files[fd] = std::move(file);
  if (fd < kFlaggedFds) {
    t.closed[fd].store(false, std::memory_order_release);
    t.flagged[fd].store(true, std::memory_order_release);
  } else {
    t.any_high.store(true, std::memory_order_release);
  }
  return fd;
}

std::shared_ptr<CmFile> find_cm_file(int fd) {
  Table& t = table();
  if (!maybe_ours(t, fd)) return nullptr;
  std::lock_guard lock(t.mutex);
  auto it = t.files.find(fd);
  return it == t.files.end() ? nullptr : it->second;
}

void forget_cm_file(int fd) {
  Table& t = table();
  if (!maybe_ours(t, fd)) return;
  std::shared_ptr<CmFile> file;
  {
    std::lock_guard lock(t.mutex);
    auto it = t.files.find(fd);
    if (it == t.files.end()) return;
    file = std::move(it->second);
    t.files.erase(it);
    if (fd < kFlaggedFds) {
      t.flagged[fd].store(false, std::memory_order_release);
      t.closed[fd].store(true, std::memory_order_release);
    }
  }
  file->close();  // destroys what is left on it, as the kernel does at close
}

bool was_closed_cm_file(int fd) {
  return fd >= 0 && fd < kFlaggedFds && table().closed[fd].load(std::memory_order_acquire);
}

}  // namespace softverbs::provider
