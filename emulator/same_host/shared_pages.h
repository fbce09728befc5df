// Registered memory moved onto a shared file, so that a peer process on the
// host maps it and executes an RDMA WRITE or READ with a plain memcpy
// (peer_pages.h), as an HCA reaches memory without a system call. On by
// default; SOFTVERBS_SHARE_MR_PAGES=0 keeps every MR's pages as they are
// (a direct operation then moves its bytes with process_vm_writev/readv,
// about 1.5 µs of system call however short the message).
//
// Sharing an MR's pages replaces them, in place and at the same addresses,
// with the pages of a memfd holding the same bytes (at registration, or
// for a large MR once a peer reaches it: deferred_sharing.h):
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
// - each file holds a descriptor of the program's: past a quarter of its
//   RLIMIT_NOFILE (and 512 files), new MRs stay as they are;
// - what another thread writes into the pages while they are copied is
//   not lost: it waits for the move (page_move.h);
// - the emulator reaches the MR through a second mapping of the file (the
//   ref's `view`), never through the program's: a range the program
//   unmaps or maps anew after registering it leaves the MR on the pages it
//   registered, as pinned pages stay an HCA's;
// - a child of fork() gets its own private copy of the pages as they were
//   at the fork, as Linux gives a child pinned pages since 5.13 (hence
//   ibv_is_fork_initialized() == IBV_FORK_UNNEEDED): the parent, its MRs
//   and its peers go on with the shared ones.
// When the last MR over them is deregistered, the pages go back to private
// anonymous memory the same way (copied, then put in place in one step),
// so that memory the program reuses after freeing the buffer (the heap's
// next allocations) is ordinary memory again.
//
// Threads: any; one mutex inside, a leaf.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace softverbs {

// Where an MR's first byte lies in the shared file.
struct SharedPagesRef {
  int32_t fd = -1;       // in this process
  uint64_t inode = 0;    // of the file: what peers check the fd they fetched against
  uint64_t offset = 0;   // of the MR's host address in the file
  uint8_t* view = nullptr;  // the file's first byte, in the emulator's own mapping of it
  // Where the MR's first byte is in that mapping.
  uint64_t view_address() const { return reinterpret_cast<uint64_t>(view) + offset; }
};

class SharedPages {
 public:
  // Whether registrations share their pages: unless SOFTVERBS_SHARE_MR_PAGES=0
  // (read once), or what set_enabled() said since (tests).
  static bool enabled();
  static void set_enabled(bool on);
  // The process's one instance (pages are the process's, not a device's).
  static SharedPages& process();

  SharedPages();
  ~SharedPages();
  SharedPages(const SharedPages&) = delete;
  SharedPages& operator=(const SharedPages&) = delete;

  // Shares the pages of [addr, addr+length), or finds them shared; nullopt
  // when they cannot be (above). Each ref is given back with release().
  std::optional<SharedPagesRef> share(uint64_t addr, uint64_t length);
  // The same only where no page need move: inside pages an MR shares.
  std::optional<SharedPagesRef> join(uint64_t addr, uint64_t length);
  void release(const SharedPagesRef& ref);
  // Whether [addr, addr+length) begins and ends on page boundaries, as
  // pages that move must.
  static bool whole_pages(uint64_t addr, uint64_t length);

 private:
  struct File {
    int32_t fd;
    uint64_t refs;
    uint64_t begin, end;  // the pages it took the place of
    uint8_t* view;        // the emulator's mapping of the whole file
  };
  // A child's copy of pages still shared at fork(), made before it.
  struct ForkCopy {
    uint64_t at, length;
    void* copy;
  };
  std::optional<SharedPagesRef> share(uint64_t addr, uint64_t length, bool may_move);
  std::optional<SharedPagesRef> move_onto_new_file(uint64_t begin, uint64_t end, uint64_t addr);
  void move_back_to_private_pages(uint64_t begin, uint64_t end, uint64_t inode);
  // Around fork() (pthread_atfork, for every instance).
  void copy_for_child();
  void drop_child_copies();
  void take_child_copies();
  friend struct ForkHandlers;

  std::mutex mutex_;
  std::unordered_map<uint64_t, File> files_;  // inode -> the file, while an MR names it
  std::vector<ForkCopy> fork_copies_;         // between the fork handlers
};

}  // namespace softverbs
