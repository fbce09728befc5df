#include "emulator/same_host/shared_pages.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "emulator/memory/address_space.h"
#include "emulator/memory/app_memory.h"
#include "emulator/memory/page_move.h"
#include "emulator/memory/raw_mm.h"

namespace softverbs {
namespace {

constexpr char kFileName[] = "softverbs-mr";
constexpr char kMappedName[] = "/memfd:softverbs-mr";

constexpr int kPopulatedPrivate = MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE;

uint64_t page_size() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

bool of_a_shared_file(const MappedRange& m) {
  return m.shared && m.path.rfind(kMappedName, 0) == 0;
}

// Private anonymous memory, as malloc and anonymous mmap give it (a name
// set with PR_SET_VMA_ANON_NAME included); not the stack, not hugetlbfs.
bool private_anonymous(const MappedRange& m) {
  return !m.shared && m.inode == 0 &&
         (m.path.empty() || m.path == "[heap]" || m.path.rfind("[anon:", 0) == 0);
}

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> on = [] {
    const char* value = std::getenv("SOFTVERBS_SHARE_MR_PAGES");
    return !(value && std::strcmp(value, "0") == 0);
  }();
  return on;
}

// Each shared file holds a descriptor for as long as an MR names it (peers
// fetch it by number), and descriptors are the program's to spend: beyond
// a quarter of its limit (and 512), MRs keep their pages private.
uint64_t most_files() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 64;
  return std::min<uint64_t>(512, limit.rlim_cur / 4);
}

// Every instance, for the fork handlers.
std::mutex g_instances_mutex;
std::vector<SharedPages*>& instances() {
  static auto* list = new std::vector<SharedPages*>;  // outlives every instance
  return *list;
}

}  // namespace

// A child of fork() takes private copies of the shared pages as they were
// at the fork: made in the parent just before, so that what the parent's
// threads and peers write after the fork is not the child's.
struct ForkHandlers {
  static void prepare() {
    g_instances_mutex.lock();
    for (SharedPages* pages : instances()) {
      pages->mutex_.lock();
      pages->copy_for_child();
    }
  }
  static void in_parent() {
    for (SharedPages* pages : instances()) {
      pages->drop_child_copies();
      pages->mutex_.unlock();
    }
    g_instances_mutex.unlock();
  }
  static void in_child() {
    for (SharedPages* pages : instances()) {
      pages->take_child_copies();
      pages->mutex_.unlock();
    }
    g_instances_mutex.unlock();
  }
};

SharedPages::SharedPages() {
  static const bool registered = [] {
    pthread_atfork(ForkHandlers::prepare, ForkHandlers::in_parent, ForkHandlers::in_child);
    return true;
  }();
  (void)registered;
  std::lock_guard lock(g_instances_mutex);
  instances().push_back(this);
}

SharedPages::~SharedPages() {
  std::lock_guard lock(g_instances_mutex);
  std::erase(instances(), this);
}

bool SharedPages::enabled() { return enabled_flag().load(std::memory_order_relaxed); }

void SharedPages::set_enabled(bool on) { enabled_flag().store(on, std::memory_order_relaxed); }

SharedPages& SharedPages::process() {
  static SharedPages* pages = new SharedPages;  // lives as long as its pages
  return *pages;
}

bool SharedPages::whole_pages(uint64_t addr, uint64_t length) {
  const uint64_t page = page_size();
  return length != 0 && addr + length > addr && (addr | length) % page == 0;
}

std::optional<SharedPagesRef> SharedPages::share(uint64_t addr, uint64_t length) {
  return share(addr, length, true);
}

std::optional<SharedPagesRef> SharedPages::join(uint64_t addr, uint64_t length) {
  return share(addr, length, false);
}

std::optional<SharedPagesRef> SharedPages::share(uint64_t addr, uint64_t length, bool may_move) {
  const uint64_t page = page_size();
  if (length == 0 || addr + length < addr) return std::nullopt;
  const uint64_t begin = addr & ~(page - 1);
  const uint64_t end = (addr + length + page - 1) & ~(page - 1);
  std::lock_guard lock(mutex_);
  // Without a move only a file's pages can be taken: where none of them
  // lay, the maps need not be read (7 µs of a large registration's 29).
  if (!may_move && std::none_of(files_.begin(), files_.end(), [&](const auto& file) {
        return file.second.begin <= begin && end <= file.second.end;
      }))
    return std::nullopt;
  const std::vector<MappedRange> maps = mappings_over(begin, end - begin);
  // Inside the pages of a file an MR already shares, at any alignment: that file.
  if (maps.size() == 1 && maps[0].begin <= begin && maps[0].end >= end &&
      of_a_shared_file(maps[0])) {
    auto file = files_.find(maps[0].inode);
    if (file != files_.end()) {
      ++file->second.refs;
      return SharedPagesRef{file->second.fd, maps[0].inode,
                            maps[0].offset + (addr - maps[0].begin), file->second.view};
    }
  }
  // Only whole pages move: nothing of the heap around the MR (a malloc
  // header, a neighbour) may be left out of a child of fork().
  if (!may_move || !whole_pages(addr, length)) return std::nullopt;
  uint64_t covered = begin;
  for (const MappedRange& m : maps) {
    if (m.begin > covered || !m.readable || !m.writable) return std::nullopt;
    const bool movable = private_anonymous(m) ||
                         (of_a_shared_file(m) && !files_.contains(m.inode));
    if (!movable) return std::nullopt;
    covered = m.end;
  }
  if (covered < end || files_.size() >= most_files()) return std::nullopt;
  return move_onto_new_file(begin, end, addr);
}

std::optional<SharedPagesRef> SharedPages::move_onto_new_file(uint64_t begin, uint64_t end,
                                                              uint64_t addr) {
  const uint64_t length = end - begin;
  const int fd = memfd_create(kFileName, MFD_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  // Reserved now, so that no access to the pages can fail for want of memory later.
  if (fallocate(fd, 0, 0, static_cast<off_t>(length)) != 0 || fstat(fd, &st) != 0) {
    close(fd);
    return std::nullopt;
  }
  // Populated in one call: a page fault per page costs far more than the copy.
  void* staging =
      raw_mm::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  void* view = raw_mm::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  auto give_up = [&] {
    if (staging != MAP_FAILED) raw_mm::munmap(staging, length);
    if (view != MAP_FAILED) raw_mm::munmap(view, length);
    close(fd);
    return std::nullopt;
  };
  if (staging == MAP_FAILED || view == MAP_FAILED) return give_up();
  // The emulator's own mapping stays with the parent: a child does not
  // use its parent's MRs.
  raw_mm::madvise(view, length, MADV_DONTFORK);
  // The bytes, then the file's pages in place of the old ones in one step:
  // a reader sees one or the other, never a hole; a writer waits.
  app_memory::catch_faults();
  auto* old_pages = reinterpret_cast<void*>(begin);
  if (!page_move::start(begin, end)) return give_up();
  const bool moved =
      raw_mm::copy(staging, old_pages, length) &&
      raw_mm::move_onto(staging, length, old_pages);
  page_move::finish(moved ? -1 : PROT_READ | PROT_WRITE);
  if (!moved) return give_up();
  const auto inode = static_cast<uint64_t>(st.st_ino);
  files_[inode] = File{fd, 1, begin, end, static_cast<uint8_t*>(view)};
  return SharedPagesRef{fd, inode, addr - begin, static_cast<uint8_t*>(view)};
}

void SharedPages::release(const SharedPagesRef& ref) {
  std::lock_guard lock(mutex_);
  auto file = files_.find(ref.inode);
  if (file == files_.end() || --file->second.refs != 0) return;
  move_back_to_private_pages(file->second.begin, file->second.end, ref.inode);
  raw_mm::munmap(file->second.view, file->second.end - file->second.begin);
  close(file->second.fd);
  files_.erase(file);
}

namespace {

// The parts of [begin, end) where the file `inode` is still mapped (the
// program may have unmapped or replaced some of it since), each with the
// protection the program gave it.
struct StillMapped {
  uint64_t from, length;
  int prot;
};
std::vector<StillMapped> still_mapped(uint64_t begin, uint64_t end, uint64_t inode) {
  std::vector<StillMapped> parts;
  for (const MappedRange& m : mappings_over(begin, end - begin)) {
    if (!of_a_shared_file(m) || m.inode != inode) continue;
    const uint64_t from = std::max(m.begin, begin);
    parts.push_back(StillMapped{from, std::min(m.end, end) - from,
                                (m.readable ? PROT_READ : 0) | (m.writable ? PROT_WRITE : 0)});
  }
  return parts;
}

// Private anonymous pages holding a copy of `part`, with its protection;
// nullptr when they could not be made.
void* private_copy(const StillMapped& part) {
  void* copy =
      raw_mm::mmap(nullptr, part.length, PROT_READ | PROT_WRITE, kPopulatedPrivate, -1, 0);
  if (copy == MAP_FAILED) return nullptr;
  if (raw_mm::copy(copy, reinterpret_cast<void*>(part.from), part.length) &&
      raw_mm::mprotect(copy, part.length, part.prot) == 0)
    return copy;
  raw_mm::munmap(copy, part.length);
  return nullptr;
}

}  // namespace

void SharedPages::move_back_to_private_pages(uint64_t begin, uint64_t end, uint64_t inode) {
  for (const StillMapped& part : still_mapped(begin, end, inode)) {
    // Writers wait only where they could write.
    const bool writable = part.prot & PROT_WRITE;
    if (writable && !page_move::start(part.from, part.from + part.length)) continue;
    void* copy = private_copy(part);
    const bool moved =
        copy && raw_mm::move_onto(copy, part.length, reinterpret_cast<void*>(part.from));
    if (writable) page_move::finish(moved ? -1 : part.prot);
    if (copy && !moved) raw_mm::munmap(copy, part.length);  // stays shared
  }
}

void SharedPages::copy_for_child() {
  fork_copies_.clear();
  for (const auto& [inode, file] : files_)
    for (const StillMapped& part : still_mapped(file.begin, file.end, inode))
      // Without a copy the child shares these pages.
      if (void* copy = private_copy(part))
        fork_copies_.push_back(ForkCopy{part.from, part.length, copy});
}

void SharedPages::drop_child_copies() {
  for (const ForkCopy& c : fork_copies_) raw_mm::munmap(c.copy, c.length);
  fork_copies_.clear();
}

void SharedPages::take_child_copies() {
  for (const ForkCopy& c : fork_copies_)
    raw_mm::move_onto(c.copy, c.length, reinterpret_cast<void*>(c.at));
  fork_copies_.clear();
  // None of the files is the child's: its MRs are its parent's.
  for (const auto& [inode, file] : files_) close(file.fd);
  files_.clear();
}

}  // namespace softverbs
