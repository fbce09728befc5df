// Memory-mapping calls made as system calls, not through the PLT.
//
// Programs patch the PLT entries of mmap, munmap, mremap and madvise in
// every loaded library to watch the address space (UCX's ucm does, to keep
// its registration cache true), and a hook may not pass every argument on:
// ucm's mremap takes four, so an MREMAP_FIXED move lands at whatever its
// fifth register held. softverbs' own moves of MR pages (shared_pages.h)
// are no business of the program's either: the memory stays where it was,
// with the same bytes. So they go to the kernel directly, and so does the
// copy of the bytes (copy()).
#pragma once

#include <sys/mman.h>
#include <sys/uio.h>
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

// Copies `n` bytes within this process by the kernel (process_vm_readv on
// itself): what a move copies is the program's memory as it lies, freed
// heap included, which a sanitizer's memcpy would take for the
// program's own use after free. false when part of it was not there.
inline bool copy(void* to, const void* from, size_t n) {
  const long self = syscall(SYS_getpid);
  auto* into = static_cast<uint8_t*>(to);
  auto* out_of = static_cast<const uint8_t*>(from);
  while (n > 0) {
    iovec local{into, n};
    iovec remote{const_cast<uint8_t*>(out_of), n};
    const long moved = syscall(SYS_process_vm_readv, self, &local, 1, &remote, 1, 0);
    if (moved <= 0) return false;
    into += moved;
    out_of += moved;
    n -= static_cast<size_t>(moved);
  }
  return true;
}

}  // namespace softverbs::raw_mm
