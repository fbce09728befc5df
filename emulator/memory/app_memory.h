// Access to the application's memory that survives the memory going away.
//
// An MR names memory the application may unmap or protect after
// registering it (and an on-demand MR names memory that need not be mapped
// at all). A real HCA then fails the access (ODP) or keeps writing to the
// pinned pages; it never makes the process take a signal. Every byte the
// HCA reads or writes in application memory therefore goes through here,
// and a fault ends the access with `false` instead of a SIGSEGV or SIGBUS.
//
// Two ways, chosen once per process by SOFTVERBS_MEMORY_COPY:
// - `guarded` (default): a plain memcpy or atomic inside a fault guard. A
//   SIGSEGV/SIGBUS handler, installed on first use, recovers a fault that
//   lies inside the range being accessed by this thread and passes every
//   other one on to the handler that was there before (or to the default
//   action), so the program sees its own faults as before. Costs a
//   sigsetjmp per access.
// - `syscall`: process_vm_readv/writev on the process itself, which the
//   kernel fails with EFAULT. Costs a system call per access; for programs
//   that install their own SIGSEGV handler after opening a device and do
//   not pass faults on. Atomics are only probed (read) before they run.
//   Always this way under ThreadSanitizer, whose runtime a fault guard
//   cannot recover from.
//
// Threads: every function may be called from any thread, with any lock
// held; nothing here takes a lock.
#pragma once

#include <cstddef>
#include <cstdint>

namespace softverbs::app_memory {

enum class Mode : uint8_t { kGuarded, kSyscall };

// The process's mode (from SOFTVERBS_MEMORY_COPY at first use).
Mode mode();
// Changes it (tests and benchmarks compare the two).
void set_mode(Mode mode);
// Installs the fault handler whatever the mode: page_move.h's writers wait
// in it (pages are moved under the program in either mode).
void catch_faults();

// Copies `n` bytes out of application memory at `app`. false on a fault
// (part of `into` may have been written).
bool read(void* into, const void* app, size_t n);
// Copies `n` bytes into application memory at `app`. false on a fault
// (part of it may have been written, as a DMA stopped half-way).
bool write(void* app, const void* from, size_t n);
// Copies `n` bytes from application memory to application memory (the
// two ranges may overlap). false on a fault in either.
bool copy(void* to, const void* from, size_t n);
// The IBTA atomics on an aligned application word; `original` is the value
// found. false on a fault (nothing changed).
bool compare_swap(uint64_t* app, uint64_t compare, uint64_t swap, uint64_t& original);
bool fetch_add(uint64_t* app, uint64_t add, uint64_t& original);
// An ATOMIC WRITE: the aligned word takes `value` in one store.
bool store(uint64_t* app, uint64_t value);
// Makes the pages of [app, app+n) present (for writing when `for_write`),
// as a prefetch of an on-demand MR does. false when part of the range is
// not mapped (with that access).
bool populate(void* app, size_t n, bool for_write);

}  // namespace softverbs::app_memory
