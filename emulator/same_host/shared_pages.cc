#include "emulator/same_host/shared_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "emulator/memory/address_space.h"
#include "emulator/memory/app_memory.h"

namespace softverbs {
namespace {

constexpr char kFileName[] = "softverbs-mr";
constexpr char kMappedName[] = "/memfd:softverbs-mr";

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
    return value && std::strcmp(value, "1") == 0;
  }();
  return on;
}

}  // namespace

bool SharedPages::enabled() { return enabled_flag().load(std::memory_order_relaxed); }

void SharedPages::set_enabled(bool on) { enabled_flag().store(on, std::memory_order_relaxed); }

SharedPages& SharedPages::process() {
  static SharedPages* pages = new SharedPages;  // lives as long as its pages
  return *pages;
}

std::optional<SharedPagesRef> SharedPages::share(uint64_t addr, uint64_t length) {
  const uint64_t page = page_size();
  if (length == 0 || addr + length < addr) return std::nullopt;
  const uint64_t begin = addr & ~(page - 1);
  const uint64_t end = (addr + length + page - 1) & ~(page - 1);
  std::lock_guard lock(mutex_);
  const std::vector<MappedRange> maps = mappings_over(begin, end - begin);
  // Inside the pages of a file an MR already shares, at any alignment: that file.
  if (maps.size() == 1 && maps[0].begin <= begin && maps[0].end >= end &&
      of_a_shared_file(maps[0])) {
    auto file = files_.find(maps[0].inode);
    if (file != files_.end()) {
      ++file->second.refs;
      return SharedPagesRef{file->second.fd, maps[0].inode,
                            maps[0].offset + (addr - maps[0].begin)};
    }
  }
  // Only whole pages move: nothing of the heap around the MR (a malloc
  // header, a neighbour) may be left out of a child of fork().
  if (addr != begin || addr + length != end) return std::nullopt;
  uint64_t covered = begin;
  for (const MappedRange& m : maps) {
    if (m.begin > covered || !m.readable || !m.writable) return std::nullopt;
    const bool movable = private_anonymous(m) ||
                         (of_a_shared_file(m) && !files_.contains(m.inode));
    if (!movable) return std::nullopt;
    covered = m.end;
  }
  if (covered < end) return std::nullopt;
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
  void* staging = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (staging == MAP_FAILED) {
    close(fd);
    return std::nullopt;
  }
  // The bytes, then the file's pages in place of the old ones in one step:
  // a reader sees one or the other, never a hole.
  auto* old_pages = reinterpret_cast<void*>(begin);
  if (!app_memory::read(staging, old_pages, length) ||
      mremap(staging, length, length, MREMAP_MAYMOVE | MREMAP_FIXED, old_pages) == MAP_FAILED) {
    munmap(staging, length);
    close(fd);
    return std::nullopt;
  }
  madvise(old_pages, length, MADV_DONTFORK);
  const auto inode = static_cast<uint64_t>(st.st_ino);
  files_[inode] = File{fd, 1, begin, end};
  return SharedPagesRef{fd, inode, addr - begin};
}

void SharedPages::release(const SharedPagesRef& ref) {
  std::lock_guard lock(mutex_);
  auto file = files_.find(ref.inode);
  if (file == files_.end() || --file->second.refs != 0) return;
  move_back_to_private_pages(file->second.begin, file->second.end, ref.inode);
  close(file->second.fd);
  files_.erase(file);
}

void SharedPages::move_back_to_private_pages(uint64_t begin, uint64_t end, uint64_t inode) {
  // Where the file is still mapped in its range: the program may have
  // unmapped or replaced some of it since.
  for (const MappedRange& m : mappings_over(begin, end - begin)) {
    if (!of_a_shared_file(m) || m.inode != inode) continue;
    const uint64_t from = std::max(m.begin, begin), length = std::min(m.end, end) - from;
    void* copy = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED) continue;  // stays shared, and kept from children
    auto* pages = reinterpret_cast<void*>(from);
    const int prot = (m.readable ? PROT_READ : 0) | (m.writable ? PROT_WRITE : 0);
    if (!app_memory::read(copy, pages, length) || mprotect(copy, length, prot) != 0 ||
        mremap(copy, length, length, MREMAP_MAYMOVE | MREMAP_FIXED, pages) == MAP_FAILED)
      munmap(copy, length);
  }
}

}  // namespace softverbs
