// One POSIX shared-memory segment of this user: the descriptor and, once
// mapped, the mapping. Every open checks that the segment belongs to the
// caller's euid and has mode 0600, so a segment planted by someone else is
// never used (EACCES).
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <string>

#include "emulator/types.h"

namespace softverbs {

class ShmSegment {
 public:
  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();  // unmaps and closes; never unlinks

  // Creates `name` (O_CREAT|O_EXCL, mode 0600 whatever the umask) and sizes
  // it to `size` bytes of zeros whose memory is reserved (posix_fallocate),
  // so touching any of it later can never raise SIGBUS. The size shows only
  // once all of it is reserved (an opener sees 0 until then). EEXIST when it
  // is already there; ENOSPC when the filesystem has no room (the segment is
  // then removed).
  static Errno create_exclusive(const std::string& name, size_t size, ShmSegment& out);

  // Opens an existing segment without mapping it. ENOENT when absent.
  static Errno open_existing(const std::string& name, ShmSegment& out);

  // Maps the first `size` bytes read-write, shared. EINVAL if the segment is
  // smaller than that (touching beyond its end would raise SIGBUS). With
  // `populate`, every page is in this mapping before it returns (its
  // memory is already reserved): a page fault per page on the first lap
  // of a ring would cost its first few hundred frames tens of microseconds
  // each.
  Errno map(size_t size, bool populate = false);

  Errno stat(struct stat& out) const;  // fstat, owner and mode checked
  void close_descriptor();             // keeps the mapping
  // Lets go of the file while keeping the address range valid: the mapping
  // becomes private zeroed memory and the descriptor is closed. For a
  // forked child, whose inherited mapping would otherwise keep the file,
  // and the locks of its open file description, alive.
  void forget_file();

  int descriptor() const { return fd_; }
  void* address() const { return address_; }
  size_t mapped_size() const { return mapped_size_; }

 private:
  static Errno reserve_zeros(int fd, size_t size);
  void release();

  int fd_ = -1;
  void* address_ = nullptr;
  size_t mapped_size_ = 0;
};

// EACCES unless `st` describes a file owned by our euid with mode 0600.
Errno check_private_to_user(const struct stat& st);

// True when `name` still refers to the file described by `st` (it was not
// unlinked, nor unlinked and created anew).
bool segment_name_refers_to(const std::string& name, const struct stat& st);

// shm_unlink that ignores a name already gone. Returns 0 or errno.
Errno unlink_segment(const std::string& name);

}  // namespace softverbs
