#include "emulator/memory/page_move.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <climits>
#include <mutex>

#include "emulator/memory/raw_mm.h"

namespace softverbs::page_move {
namespace {

// Held from start() to finish(): one move at a time, whoever moves.
std::mutex g_one_move;
// Odd while a move runs; a futex word the waiting writers sleep on.
std::atomic<uint32_t> g_sequence{0};
std::atomic<uint64_t> g_begin{0}, g_end{0};
std::atomic<uint64_t> g_writes_held{0};

// The last moves finished: a thread whose fault was delivered only after
// the move ended finds its range here and writes again once.
struct Finished {
  std::atomic<uint64_t> begin{0}, end{0};
  std::atomic<uint32_t> sequence{0};
};
std::array<Finished, 4> g_finished;

// The fault this thread last sent back to write again: the same fault
// coming back after a finished move is the program's own.
struct Retried {
  uintptr_t address = 0;
  uint32_t sequence = 0;
};
[[gnu::tls_model("initial-exec")]] thread_local Retried t_retried;

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}

// [addr, addr+length) and [begin, end) share a byte.
bool overlaps(uint64_t addr, uint64_t length, uint64_t begin, uint64_t end) {
  return addr < end && begin < addr + length;
}

// Whether the move `sequence` (odd: running when read) is over
// [addr, addr+length): the range read is that move's only if no other
// began since.
bool running_over(uint32_t sequence, uint64_t addr, uint64_t length) {
  return overlaps(addr, length, g_begin.load(std::memory_order_relaxed),
                  g_end.load(std::memory_order_relaxed)) &&
         g_sequence.load(std::memory_order_acquire) == sequence;
}

void wait_for_end(uint32_t sequence) {
  while (g_sequence.load(std::memory_order_acquire) == sequence) futex_wait(g_sequence, sequence);
}

// The latest finished move over [addr, addr+length) that is remembered,
// whichever slots cover it; 0: none.
uint32_t latest_finished_over(uint64_t addr, uint64_t length) {
  uint32_t latest = 0;
  for (const Finished& slot : g_finished) {
    const uint32_t finished = slot.sequence.load(std::memory_order_relaxed);
    if (finished != 0 &&
        overlaps(addr, length, slot.begin.load(std::memory_order_relaxed),
                 slot.end.load(std::memory_order_relaxed)) &&
        (latest == 0 || static_cast<int32_t>(finished - latest) > 0))
      latest = finished;
  }
  return latest;
}

}  // namespace

bool start(uint64_t begin, uint64_t end) {
  g_one_move.lock();
  g_begin.store(begin, std::memory_order_relaxed);
  g_end.store(end, std::memory_order_relaxed);
  // Odd before the pages turn read-only: a fault on them finds the move.
  g_sequence.fetch_add(1, std::memory_order_release);
  if (raw_mm::mprotect(reinterpret_cast<void*>(begin), end - begin, PROT_READ) == 0) return true;
  g_sequence.fetch_add(1, std::memory_order_release);
  futex_wake_all(g_sequence);
  g_one_move.unlock();
  return false;
}

void finish(int restore_prot) {
  const uint64_t begin = g_begin.load(std::memory_order_relaxed);
  const uint64_t end = g_end.load(std::memory_order_relaxed);
  if (restore_prot >= 0)
    raw_mm::mprotect(reinterpret_cast<void*>(begin), end - begin, restore_prot);
  const uint32_t done = g_sequence.load(std::memory_order_relaxed) + 1;
  Finished& slot = g_finished[(done / 2) % g_finished.size()];
  slot.begin.store(begin, std::memory_order_relaxed);
  slot.end.store(end, std::memory_order_relaxed);
  slot.sequence.store(done, std::memory_order_relaxed);
  g_sequence.store(done, std::memory_order_release);
  futex_wake_all(g_sequence);
  g_one_move.unlock();
}

bool waited_for(uintptr_t address) {
  const uint32_t sequence = g_sequence.load(std::memory_order_acquire);
  if ((sequence & 1) && running_over(sequence, address, 1)) {
    g_writes_held.fetch_add(1, std::memory_order_relaxed);
    wait_for_end(sequence);
    return true;
  }
  // Once after the latest finished move over the address: a range moved
  // onto a file and back has two, and a fault retried after each in turn
  // would be retried for ever.
  const uint32_t latest = latest_finished_over(address, 1);
  if (latest == 0 || (t_retried.address == address && t_retried.sequence == latest)) return false;
  t_retried = Retried{address, latest};
  return true;
}

uint32_t moves_begun() { return g_sequence.load(std::memory_order_acquire); }

bool moved_since(uint32_t before, uint64_t addr, uint64_t length) {
  const uint32_t now = g_sequence.load(std::memory_order_acquire);
  if ((now & 1) && running_over(now, addr, length)) {
    wait_for_end(now);
    return true;
  }
  if (now == before) return false;
  const uint32_t latest = latest_finished_over(addr, length);
  return latest != 0 && static_cast<int32_t>(latest - before) > 0;
}

uint64_t writes_held() { return g_writes_held.load(std::memory_order_relaxed); }

}  // namespace softverbs::page_move
