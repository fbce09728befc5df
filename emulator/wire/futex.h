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

}  // namespace softverbs
