// Pages replaced in place while the program runs, without losing a write.
//
// Shared MR pages (same_host/shared_pages.h) are moved onto a file at
// registration and back at the last deregistration: the bytes are copied
// into the new pages, which then take the old ones' place at the same
// addresses in one mremap. A write another thread made into the old pages
// while they were copied would be lost. So the range turns read-only for
// the time of the copy: a thread that writes into it takes a fault, waits
// for the move in the fault handler (app_memory.h's, which asks here
// first), and when the handler returns its write runs again, into the new
// pages. Readers never wait.
//
// The kernel's own writes into the range (read(2) into the buffer, say)
// are not held: for the time of a copy they fail with EFAULT, as into any
// read-only page.
//
// Threads: moves from any thread, one at a time (start() waits for the one
// running to finish()); the fault side runs in a signal handler on any
// thread and only loads, compares and waits on a futex.
#pragma once

#include <cstdint>

namespace softverbs::page_move {

// Starts a move of the pages [begin, end): they turn read-only until
// finish(). false (nothing changed) when they could not be protected.
bool start(uint64_t begin, uint64_t end);
// Ends the move started last: the writers waiting for it write again, into
// whatever is mapped there now. `restore_prot` is for the pages when the
// move was given up (the old pages stay): their protection before start().
void finish(int restore_prot = -1);

// From the SIGSEGV handler, for an access fault at `address`: whether it
// was a write into pages that were being moved (now waited for), so that
// the faulting instruction is to run again. Async-signal-safe.
bool waited_for(uintptr_t address);

// For a write the kernel makes (a system call into the pages, which fails
// with EFAULT while they are read-only): read moves_begun() before the
// call, and when it failed ask moved_since() whether a move over
// [addr, addr+length) ran meanwhile (waiting for one still running), in
// which case the call is to be made again.
uint32_t moves_begun();
bool moved_since(uint32_t before, uint64_t addr, uint64_t length);

// How many faults waited for a move (tests).
uint64_t writes_held();

}  // namespace softverbs::page_move
