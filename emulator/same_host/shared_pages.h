// Registered memory moved onto a shared file, so that a peer process on the
// host maps it and executes an RDMA WRITE or READ with a plain memcpy
// (peer_pages.h), as an HCA reaches memory without a system call. Opt-in
// (SOFTVERBS_SHARE_MR_PAGES=1): the default moves the bytes of a direct
// operation with process_vm_writev/readv, about 1.5 µs of system call
// however short the message.
//
// Sharing an MR's pages replaces them, in place and at the same addresses,
// with the pages of a memfd holding the same bytes:
// - the MR must begin and end on page boundaries (memory from
//   posix_memalign or mmap, as perftest and most RDMA programs allocate
//   it), and lie in private anonymous memory (the heap, an anonymous
//   mmap), readable and writable, or in pages this process shared before
//   and no MR names any more; anything else (an unaligned MR, a file, the
//   stack, hugetlbfs, read-only memory) stays as it is and is reached by
//   system calls. An MR inside pages an MR already shares takes them, at
//   any alignment;
// - a range that overlaps pages an MR still shares, without lying inside
//   them, stays as it is: moving them would part that MR from its file;
// - what another thread writes into those pages while the registration
//   copies them is lost;
// - a child of fork() does not inherit them (MADV_DONTFORK, as
//   ibv_fork_init(3) does to registered memory): a MAP_SHARED page would
//   be written by parent and child alike, and cannot be copied on write.
//   A child that touches the registered memory (free() of it included)
//   takes a SIGSEGV, as under ibv_fork_init.
// When the last MR over them is deregistered, the pages go back to private
// anonymous memory the same way (copied, then put in place in one step),
// so that memory the program reuses after freeing the buffer (the heap's
// next allocations) is inherited by children again. What another thread
// writes into them meanwhile is lost, as at registration.
//
// Threads: any; one mutex inside, a leaf.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace softverbs {

// Where an MR's first byte lies in the shared file.
struct SharedPagesRef {
  int32_t fd = -1;       // in this process
  uint64_t inode = 0;    // of the file: what peers check the fd they fetched against
  uint64_t offset = 0;   // of the MR's host address in the file
};

class SharedPages {
 public:
  // Whether registrations share their pages: SOFTVERBS_SHARE_MR_PAGES=1
  // (read once), or what set_enabled() said since (tests).
  static bool enabled();
  static void set_enabled(bool on);
  // The process's one instance (pages are the process's, not a device's).
  static SharedPages& process();

  // Shares the pages of [addr, addr+length), or finds them shared; nullopt
  // when they cannot be (above). Each ref is given back with release().
  std::optional<SharedPagesRef> share(uint64_t addr, uint64_t length);
  void release(const SharedPagesRef& ref);

 private:
  struct File {
    int32_t fd;
    uint64_t refs;
    uint64_t begin, end;  // the pages it took the place of
  };
  std::optional<SharedPagesRef> move_onto_new_file(uint64_t begin, uint64_t end, uint64_t addr);
  void move_back_to_private_pages(uint64_t begin, uint64_t end, uint64_t inode);

  std::mutex mutex_;
  std::unordered_map<uint64_t, File> files_;  // inode -> the file, while an MR names it
};

}  // namespace softverbs
