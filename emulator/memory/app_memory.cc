#include "emulator/memory/app_memory.h"

#include "emulator/memory/page_move.h"
#include "emulator/wire/process_identity.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

namespace softverbs::app_memory {
namespace {

// ---- the fault guard

// Where a guarded access of this thread resumes after a fault in
// [begin, end). Set only around the access itself.
struct Recovery {
  sigjmp_buf resume;
  uintptr_t begin;
  uintptr_t end;
  // A second range, for a copy between two places of application memory.
  uintptr_t other_begin = 0;
  uintptr_t other_end = 0;

  bool covers(uintptr_t address) const {
    return (address >= begin && address < end) ||
           (address >= other_begin && address < other_end);
  }
};

// initial-exec: read from a signal handler, which must not allocate a TLS
// block lazily.
[[gnu::tls_model("initial-exec")]] thread_local Recovery* t_recovery = nullptr;

struct sigaction g_previous_segv, g_previous_bus;

const struct sigaction& previous_action(int sig) {
  return sig == SIGBUS ? g_previous_bus : g_previous_segv;
}

bool has_handler(const struct sigaction& action) {
  return (action.sa_flags & SA_SIGINFO) ||
         (action.sa_handler != SIG_DFL && action.sa_handler != SIG_IGN);
}

// A signal that is not a fault of a guarded access, with no handler of the
// program's before ours: what the kernel would have done.
void default_action(int sig, const siginfo_t* info, const struct sigaction& previous) {
  const bool sent = info->si_code <= 0;  // kill(), sigqueue(), tgkill()
  if (sent && previous.sa_handler == SIG_IGN) return;
  // A fault happens again on return and ends the process as it would have;
  // a sent signal is raised again.
  signal(sig, SIG_DFL);
  if (sent) raise(sig);
}

// Apart, so that on_fault keeps no local whose address escapes: that would
// stop the compiler from turning its last call into a jump.
[[gnu::noinline]] void block_as_asked(const struct sigaction& previous, int sig) {
  sigset_t mask = previous.sa_mask;
  if (!(previous.sa_flags & SA_NODEFER)) sigaddset(&mask, sig);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
}

void on_fault(int sig, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  // A write into pages being moved (ours or the program's): it runs again
  // once they are in place.
  if (sig == SIGSEGV && info->si_code == SEGV_ACCERR && page_move::waited_for(address)) return;
  Recovery* recovery = t_recovery;
  if (recovery && info->si_code > 0 && recovery->covers(address)) {
    t_recovery = nullptr;
    siglongjmp(recovery->resume, 1);
  }
  // Not ours: as if we were not here.
  const struct sigaction& previous = previous_action(sig);
  if (!has_handler(previous)) return default_action(sig, info, previous);
  // The program's handler runs with the mask it asked for (ours has
  // SA_NODEFER, so the signal itself is not blocked now); the kernel puts
  // the interrupted mask back at sigreturn. Its call is the last thing done
  // here, a tail call the compiler makes a jump: the handler then runs right
  // above the signal frame, and the backtrace it prints (Open MPI's, say)
  // starts at the fault, not in softverbs.
  block_as_asked(previous, sig);
  if (previous.sa_flags & SA_SIGINFO) return previous.sa_sigaction(sig, info, context);
  return previous.sa_handler(sig);
}

void install_fault_handler() {
  sigaction(SIGSEGV, nullptr, &g_previous_segv);
  sigaction(SIGBUS, nullptr, &g_previous_bus);
  struct sigaction action {};
  action.sa_sigaction = on_fault;
  // NODEFER: the guarded access leaves the handler by siglongjmp without
  // restoring the signal mask (a sigprocmask per access would cost more
  // than the copy), so the signal must not be blocked in it.
  action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK | SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, nullptr);
  sigaction(SIGBUS, &action, nullptr);
}

using Access = void (*)(void* state);

// Runs access(state), which touches only [app, app+n) of application
// memory (and [other, other+n) when `other` is given), and reports whether
// it ran without a fault there. Not inlined: nothing but `recovery` lives
// across the sigsetjmp.
[[gnu::noinline]] bool guarded(const void* app, size_t n, Access access, void* state,
                               const void* other = nullptr) {
  // The first page is never mapped (vm.mmap_min_addr): no copy need try,
  // and memcpy must not be handed a null pointer.
  if (!app) return false;
  Recovery recovery;
  recovery.begin = reinterpret_cast<uintptr_t>(app);
  recovery.end = recovery.begin + n;
  if (other) {
    recovery.other_begin = reinterpret_cast<uintptr_t>(other);
    recovery.other_end = recovery.other_begin + n;
  }
  if (sigsetjmp(recovery.resume, 0) != 0) return false;
  t_recovery = &recovery;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  access(state);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_recovery = nullptr;
  return true;
}

// ---- the system-call way

bool vm_read(void* into, const void* app, size_t n) {
  iovec local{into, n};
  iovec remote{const_cast<void*>(app), n};
  return process_vm_readv(own_pid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

// Made again when pages under it moved meanwhile (page_move.h): the kernel
// fails a write into them with EFAULT while they are read-only.
bool vm_write(void* app, const void* from, size_t n) {
  iovec local{const_cast<void*>(from), n};
  iovec remote{app, n};
  for (;;) {
    const uint32_t moves = page_move::moves_begun();
    if (process_vm_writev(own_pid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n))
      return true;
    if (!page_move::moved_since(moves, reinterpret_cast<uint64_t>(app), n)) return false;
  }
}

// ---- the mode

std::atomic<Mode> g_mode{Mode::kGuarded};

Mode mode_from_environment() {
  const char* value = std::getenv("SOFTVERBS_MEMORY_COPY");
  return value && std::strcmp(value, "syscall") == 0 ? Mode::kSyscall : Mode::kGuarded;
}

std::once_flag g_handler_once;

void use_mode(Mode mode) {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer's interceptors and atomics run inside its runtime, which
  // a fault must not leave by siglongjmp: copies go by system calls there.
  mode = Mode::kSyscall;
#endif
  // The handler only where faults are to be caught: a program that asked
  // for system calls keeps its signal dispositions as they were.
  if (mode == Mode::kGuarded) catch_faults();
  g_mode.store(mode, std::memory_order_release);
}

bool set_up() {
  use_mode(mode_from_environment());
  return true;
}

}  // namespace

void catch_faults() { std::call_once(g_handler_once, install_fault_handler); }

namespace {

Mode current_mode() {
  static const bool ready = set_up();
  (void)ready;
  return g_mode.load(std::memory_order_acquire);
}

struct CopyState {
  void* to;
  const void* from;
  size_t n;
};

struct AtomicState {
  uint64_t* word;
  uint64_t operand;
  uint64_t swap;
  uint64_t original;
};

size_t page_size() {
  static const size_t size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// Touches one byte per page, as a device's page faults would. (With system
// calls only reading can be tried without changing the memory.)
bool touch_pages(void* app, size_t n, bool for_write) {
  const size_t page = page_size();
  auto* p = static_cast<uint8_t*>(app);
  const bool syscalls = current_mode() == Mode::kSyscall;
  for (size_t off = 0; off < n; off = (off / page + 1) * page) {
    uint8_t* byte = p + off;
    uint8_t value;
    const bool ok = syscalls ? vm_read(&value, byte, 1)
                    : for_write
                        ? guarded(byte, 1, [](void* b) {
                            __atomic_fetch_or(static_cast<uint8_t*>(b), 0, __ATOMIC_RELAXED);
                          }, byte)
                        : guarded(byte, 1, [](void* b) {
                            (void)*static_cast<volatile uint8_t*>(b);
                          }, byte);
    if (!ok) return false;
  }
  return true;
}

// An atomic cannot be done by a system call: with system calls the word is
// probed by reading it first, and the operation runs unguarded.
bool run_atomic(uint64_t* app, Access op, AtomicState* state) {
  if (current_mode() == Mode::kGuarded) return guarded(app, sizeof(uint64_t), op, state);
  uint64_t probe;
  if (!vm_read(&probe, app, sizeof(probe))) return false;
  op(state);
  return true;
}

}  // namespace

Mode mode() { return current_mode(); }

void set_mode(Mode mode) {
  current_mode();
  use_mode(mode);
}

bool read(void* into, const void* app, size_t n) {
  if (n == 0) return true;
  if (current_mode() == Mode::kSyscall) return vm_read(into, app, n);
  CopyState s{into, app, n};
  return guarded(app, n, [](void* p) {
    auto* c = static_cast<CopyState*>(p);
    std::memcpy(c->to, c->from, c->n);
  }, &s);
}

bool write(void* app, const void* from, size_t n) {
  if (n == 0) return true;
  if (current_mode() == Mode::kSyscall) return vm_write(app, from, n);
  CopyState s{app, from, n};
  return guarded(app, n, [](void* p) {
    auto* c = static_cast<CopyState*>(p);
    std::memcpy(c->to, c->from, c->n);
  }, &s);
}

bool copy(void* to, const void* from, size_t n) {
  if (n == 0) return true;
  if (!from) return false;
  // One system call on the process itself fails with EFAULT for either
  // side; it copies forward, so overlapping ranges go through a copy.
  if (current_mode() == Mode::kSyscall) {
    const auto a = reinterpret_cast<uintptr_t>(to), b = reinterpret_cast<uintptr_t>(from);
    if (a < b + n && b < a + n) {
      std::vector<uint8_t> bounce(n);
      return vm_read(bounce.data(), from, n) && vm_write(to, bounce.data(), n);
    }
    return vm_write(to, from, n);
  }
  CopyState s{to, from, n};
  // memmove: a WRITE within one MR may name a range that overlaps its source.
  return guarded(to, n, [](void* p) {
    auto* c = static_cast<CopyState*>(p);
    std::memmove(c->to, c->from, c->n);
  }, &s, from);
}

bool compare_swap(uint64_t* app, uint64_t compare, uint64_t swap, uint64_t& original) {
  AtomicState s{app, compare, swap, compare};
  auto op = [](void* p) {
    auto* a = static_cast<AtomicState*>(p);
    __atomic_compare_exchange_n(a->word, &a->original, a->swap, false, __ATOMIC_SEQ_CST,
                                __ATOMIC_SEQ_CST);
  };
  if (!run_atomic(app, op, &s)) return false;
  original = s.original;
  return true;
}

bool fetch_add(uint64_t* app, uint64_t add, uint64_t& original) {
  AtomicState s{app, add, 0, 0};
  auto op = [](void* p) {
    auto* a = static_cast<AtomicState*>(p);
    a->original = __atomic_fetch_add(a->word, a->operand, __ATOMIC_SEQ_CST);
  };
  if (!run_atomic(app, op, &s)) return false;
  original = s.original;
  return true;
}

bool store(uint64_t* app, uint64_t value) {
  AtomicState s{app, value, 0, 0};
  auto op = [](void* p) {
    auto* a = static_cast<AtomicState*>(p);
    __atomic_store_n(a->word, a->operand, __ATOMIC_SEQ_CST);
  };
  return run_atomic(app, op, &s);
}

bool populate(void* app, size_t n, bool for_write) {
  if (n == 0) return true;
  current_mode();
  const uintptr_t page = page_size();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(app) & ~(page - 1);
  const uintptr_t last = reinterpret_cast<uintptr_t>(app) + (n - 1);
  const size_t length = (last & ~(page - 1)) + page - begin;
  // The kernel faults the pages in and reports a range it cannot, without
  // a signal (Linux 5.14 and later; EINVAL before, or for special mappings).
  int rc;
  do {
    rc = madvise(reinterpret_cast<void*>(begin), length,
                 for_write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
  } while (rc != 0 && (errno == EINTR || errno == EAGAIN));
  if (rc == 0) return true;
  if (errno != EINVAL) return false;
  return touch_pages(app, n, for_write);
}

}  // namespace softverbs::app_memory
