// Futex calls on words that live in memory shared between processes. These
// are the shared (not FUTEX_PRIVATE_FLAG) variants: the kernel keys the
// wait queue on the page, not on this process's address space.
#pragma once

#include <atomic>
#include <cstdint>

namespace softverbs {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// Sleeps while `*word == expected`, at most `timeout_ns` (0: no limit).
// Returns early on a wake, a signal, or when the word no longer matches.
void futex_wait_shared(std::atomic<uint32_t>& word, uint32_t expected, uint64_t timeout_ns);

// Wakes up to `count` sleepers on `word`.
void futex_wake_shared(std::atomic<uint32_t>& word, int count);

// Sleeps until a wake on either word, or while both hold what is expected:
// `own` is private to this process, `shared` lives in shared memory.
// Returns 0 after a wake (or a spurious one), else the errno: EAGAIN (a
// word no longer matched), EINTR (a signal whose handler was installed
// without SA_RESTART; the kernel restarts the wait after any other), ENOSYS
// (futex_waitv is missing: Linux before 5.16, or a seccomp filter).
int futex_wait_either(std::atomic<uint32_t>& own, uint32_t own_expected,
                      std::atomic<uint32_t>& shared, uint32_t shared_expected);
// Whether futex_wait_either() can work here (asked of the kernel once).
bool futex_wait_either_available();

}  // namespace softverbs
