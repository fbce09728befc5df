// A lock in memory shared between processes: a 32-bit word that holds 0 or
// its holder's tag, its pid and bits of its start time. A holder that dies
// leaves the tag behind; a waiter that finds the holder gone takes the lock
// over. Gone: no such process, a zombie its parent has not reaped, or a
// process of another start time that the kernel gave the holder's pid
// since. Holders keep it for one bounded step (one copy between address
// spaces), so waiting for a live one is waiting for that step.
//
// Only processes of one pid namespace use a word, so a pid names the same
// process for all of them (where /proc was not mounted for that namespace,
// only the pid is asked after). A word holding what no holder writes
// (garbage written by another process) is taken over like a dead holder's.
#pragma once

#include <cstdint>

namespace softverbs::shared_lock_word {

// The word's value this process writes when it holds a lock.
uint32_t self_tag();

// One attempt, then up to `spins` more while it is held: false when still held.
bool try_lock(uint32_t& word, uint32_t spins = 0);
// Waits for the word, taking it over from a holder that has died.
void lock(uint32_t& word);
void unlock(uint32_t& word);

// Holds a word for a scope (lock() on construction).
class Guard {
 public:
  explicit Guard(uint32_t& word) : word_(word) { lock(word_); }
  ~Guard() { unlock(word_); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  uint32_t& word_;
};

}  // namespace softverbs::shared_lock_word
