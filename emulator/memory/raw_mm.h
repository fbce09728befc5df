// Memory-mapping calls made as system calls, not through the PLT.
//
// Programs patch the PLT entries of mmap, munmap, mremap and madvise in
// every loaded library to watch the address space (UCX's ucm does, to keep
// its registration cache true), and a hook may not pass every argument on:
// ucm's mremap takes four, so an MREMAP_FIXED move lands at whatever its
// fifth register held. softverbs' own moves of MR pages (shared_pages.h)
// are no business of the program's either: the memory stays where it was,
// with the same bytes. So they go to the kernel directly.
#pragma once

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace softverbs::raw_mm {

inline void* mmap(void* addr, size_t length, int prot, int flags, int fd, off_t offset) {
  const long r = syscall(SYS_mmap, addr, length, prot, flags, fd, offset);
  return r == -1 ? MAP_FAILED : reinterpret_cast<void*>(r);
}

inline int munmap(void* addr, size_t length) {
  return static_cast<int>(syscall(SYS_munmap, addr, length));
}

inline int mprotect(void* addr, size_t length, int prot) {
  return static_cast<int>(syscall(SYS_mprotect, addr, length, prot));
}

inline int madvise(void* addr, size_t length, int advice) {
  return static_cast<int>(syscall(SYS_madvise, addr, length, advice));
}

// Moves [from, from+length) onto `to` exactly (MREMAP_FIXED), replacing what
// was there; false (nothing moved) otherwise.
inline bool move_onto(void* from, size_t length, void* to) {
  const long r = syscall(SYS_mremap, from, length, length, MREMAP_MAYMOVE | MREMAP_FIXED, to);
  return r != -1 && reinterpret_cast<void*>(r) == to;
}

}  // namespace softverbs::raw_mm
