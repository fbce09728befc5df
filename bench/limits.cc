// bench_limits: what this machine allows any shared-memory transport between
// two processes, measured the way softverbs' own figures are, so the report
// can put them side by side:
//   hop ITERATIONS    one-way latency of a value bouncing through one shared
//                     cache line between two busy-polling processes
//   stalls ITERATIONS the same hop timed one round trip at a time: how often
//                     the machine stops a busy process for a while (the
//                     hypervisor, interrupts), which no transport's tail
//                     latency can beat
//   futex ITERATIONS  the same hop when each side sleeps in FUTEX_WAIT and is
//                     woken by FUTEX_WAKE (what a doorbell costs)
//   faults PAGES      the first touch of a fresh anonymous page (a minor
//                     fault): what a program pays for memory it allocated
//                     but had not touched yet, inside its timed loop
//   memcpy BYTES      memcpy bandwidth inside one process
//   cma BYTES         process_vm_writev bandwidth into another process (the
//                     one-copy path of softverbs' large payloads)
// Each prints one line of key=value pairs on stdout: the median of a few
// batches and the fastest and slowest batch (stalls: its own figures).
// Errors go to stderr, exit 1.
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBatches = 15;
// Any wait on the other process longer than this is a hang.
constexpr auto kHangLimit = std::chrono::seconds(30);

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "bench_limits: %s\n", what.c_str());
  std::exit(1);
}

[[noreturn]] void fail_errno(const std::string& what) { fail(what + ": " + std::strerror(errno)); }

double seconds_since(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

// Prints `key=median key_min=... key_max=...` for the batch figures.
void print_spread(const char* key, std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::printf("%s=%.6g %s_min=%.6g %s_max=%.6g", key, values[values.size() / 2], key, values.front(), key,
              values.back());
}

// The figure below which `fraction` of the (sorted, non-empty) values lie.
double at_fraction(const std::vector<double>& sorted, double fraction) {
  const size_t n = sorted.size();
  return sorted[std::min<size_t>(n - 1, static_cast<size_t>(fraction * static_cast<double>(n)))];
}

// Memory shared with the child, mapped before fork.
template <typename T>
T* shared_object() {
  void* memory = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) fail_errno("mmap");
  return new (memory) T();
}

struct alignas(64) SharedWord {
  std::atomic<uint32_t> value{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared across processes");

// Forks a child that runs `body` and exits with its status; the child dies
// with its parent so a killed benchmark leaves nothing behind.
template <typename Body>
pid_t fork_child(Body body) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) fail_errno("fork");
  if (pid == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1);
    _exit(body());
  }
  return pid;
}

void reap(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) fail_errno("waitpid");
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("the child process failed");
}

// Spins until `word` holds `expected`; false after kHangLimit.
bool spin_until(const std::atomic<uint32_t>& word, uint32_t expected) {
  const auto deadline = Clock::now() + kHangLimit;
  for (uint32_t spins = 1; word.load(std::memory_order_acquire) != expected; ++spins) {
    if ((spins & 0xfff) == 0 && Clock::now() > deadline) return false;
  }
  return true;
}

// The other end of a hop: a child that answers each of `round_trips` odd
// values with the next even one.
pid_t fork_answerer(SharedWord& line, uint64_t round_trips) {
  return fork_child([&line, round_trips] {
    for (uint64_t i = 0; i < round_trips; ++i) {
      const auto odd = static_cast<uint32_t>(2 * i + 1);
      if (!spin_until(line.value, odd)) return 1;
      line.value.store(odd + 1, std::memory_order_release);
    }
    return 0;
  });
}

// Round trip `i` through the answerer.
void round_trip(SharedWord& line, uint64_t i) {
  line.value.store(static_cast<uint32_t>(2 * i + 1), std::memory_order_release);
  if (!spin_until(line.value, static_cast<uint32_t>(2 * i + 2))) fail("the child stopped answering");
}

void hop(uint64_t iterations) {
  auto* line = shared_object<SharedWord>();
  const uint64_t per_batch = std::max<uint64_t>(iterations / kBatches, 1);
  const uint64_t total = per_batch * kBatches;
  const pid_t child = fork_answerer(*line, total);
  std::vector<double> one_way_ns;
  uint64_t i = 0;
  for (int batch = 0; batch < kBatches; ++batch) {
    const auto begin = Clock::now();
    for (uint64_t k = 0; k < per_batch; ++k, ++i) {
      round_trip(*line, i);
    }
    one_way_ns.push_back(seconds_since(begin) * 1e9 / static_cast<double>(per_batch) / 2);
  }
  reap(child);
  print_spread("one_way_ns", one_way_ns);
  std::printf(" iterations=%llu\n", static_cast<unsigned long long>(total));
}

// A round trip slower than this was stalled: a hop takes a few hundred ns.
// The mean time between stalls is the run's time over their number.
constexpr double kStallNs = 1000;

void stalls(uint64_t iterations) {
  auto* line = shared_object<SharedWord>();
  const pid_t child = fork_answerer(*line, iterations);
  std::vector<double> round_trip_ns(iterations);
  uint64_t stalled = 0;
  const auto start = Clock::now();
  for (uint64_t i = 0; i < iterations; ++i) {
    const auto begin = Clock::now();
    round_trip(*line, i);
    round_trip_ns[i] = std::chrono::duration<double, std::nano>(Clock::now() - begin).count();
    if (round_trip_ns[i] > kStallNs) ++stalled;
  }
  const double elapsed_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  reap(child);
  std::sort(round_trip_ns.begin(), round_trip_ns.end());
  const auto at = [&](double fraction) { return at_fraction(round_trip_ns, fraction) / 2; };
  std::printf("one_way_ns=%.6g p99_ns=%.6g p999_ns=%.6g stalled_pct=%.4g stall_every_us=%.6g iterations=%llu\n",
              at(0.5), at(0.99), at(0.999), 100.0 * static_cast<double>(stalled) / static_cast<double>(iterations),
              stalled == 0 ? elapsed_us : elapsed_us / static_cast<double>(stalled),
              static_cast<unsigned long long>(iterations));
}

// perftest's latency tools write a timestamp per iteration into arrays
// they allocated and never touched before: a fault every 512 iterations,
// on each side, inside the timed loop.
void first_touch_faults(uint64_t pages) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* area = mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (area == MAP_FAILED) fail("mmap: " + std::string(std::strerror(errno)));
  auto* bytes = static_cast<volatile uint8_t*>(area);
  std::vector<double> touch_ns(pages);
  for (uint64_t i = 0; i < pages; ++i) {
    const auto begin = Clock::now();
    bytes[i * page] = 1;
    touch_ns[i] = std::chrono::duration<double, std::nano>(Clock::now() - begin).count();
  }
  munmap(area, pages * page);
  std::sort(touch_ns.begin(), touch_ns.end());
  std::printf("fault_ns=%.6g p10_ns=%.6g p90_ns=%.6g pages=%llu\n", at_fraction(touch_ns, 0.5),
              at_fraction(touch_ns, 0.1), at_fraction(touch_ns, 0.9), static_cast<unsigned long long>(pages));
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

// Sleeps until `word` holds `expected`. Not FUTEX_PRIVATE: the word is shared
// between processes.
bool sleep_until(std::atomic<uint32_t>& word, uint32_t expected) {
  const auto deadline = Clock::now() + kHangLimit;
  const timespec slice{1, 0};
  for (uint32_t seen; (seen = word.load(std::memory_order_acquire)) != expected;) {
    if (futex(&word, FUTEX_WAIT, seen, &slice) != 0 && errno != EAGAIN && errno != EINTR &&
        errno != ETIMEDOUT)
      return false;
    if (Clock::now() > deadline) return false;
  }
  return true;
}

void store_and_wake(std::atomic<uint32_t>& word, uint32_t value) {
  word.store(value, std::memory_order_release);
  futex(&word, FUTEX_WAKE, 1, nullptr);
}

void futex_hop(uint64_t iterations) {
  auto* word = shared_object<SharedWord>();
  const uint64_t per_batch = std::max<uint64_t>(iterations / kBatches, 1);
  const uint64_t total = per_batch * kBatches;
  const pid_t child = fork_child([&] {
    for (uint64_t i = 0; i < total; ++i) {
      const auto odd = static_cast<uint32_t>(2 * i + 1);
      if (!sleep_until(word->value, odd)) return 1;
      store_and_wake(word->value, odd + 1);
    }
    return 0;
  });
  std::vector<double> one_way_us;
  uint64_t i = 0;
  for (int batch = 0; batch < kBatches; ++batch) {
    const auto begin = Clock::now();
    for (uint64_t k = 0; k < per_batch; ++k, ++i) {
      store_and_wake(word->value, static_cast<uint32_t>(2 * i + 1));
      if (!sleep_until(word->value, static_cast<uint32_t>(2 * i + 2))) fail("the child stopped answering");
    }
    one_way_us.push_back(seconds_since(begin) * 1e6 / static_cast<double>(per_batch) / 2);
  }
  reap(child);
  print_spread("one_way_us", one_way_us);
  std::printf(" iterations=%llu\n", static_cast<unsigned long long>(total));
}

// How many calls of `copy` make a batch of about 20 ms: long enough for the
// clock, short enough that a batch is over before the scheduler moves much.
template <typename Copy>
uint64_t calibrate(Copy copy) {
  for (uint64_t count = 1;; count *= 2) {
    const auto begin = Clock::now();
    for (uint64_t k = 0; k < count; ++k) copy();
    if (seconds_since(begin) >= 0.02 || count >= (1u << 30)) return count;
  }
}

void memcpy_bandwidth(std::size_t bytes) {
  std::vector<char> source(bytes, 'x');
  std::vector<char> target(bytes, 0);
  auto copy = [&] {
    std::memcpy(target.data(), source.data(), bytes);
    // Keeps the compiler from dropping copies whose result nobody reads.
    asm volatile("" : : "r"(target.data()) : "memory");
  };
  const uint64_t copies = calibrate(copy);
  std::vector<double> gbps;
  for (int batch = 0; batch < kBatches; ++batch) {
    const auto begin = Clock::now();
    for (uint64_t k = 0; k < copies; ++k) copy();
    gbps.push_back(static_cast<double>(bytes * copies) / seconds_since(begin) / 1e9);
  }
  print_spread("gbps", gbps);
  std::printf(" bytes=%zu\n", bytes);
}

void cma_bandwidth(std::size_t bytes) {
  // The child maps its target buffer and tells the parent where it is; it
  // then waits until the parent closes the pipe.
  int to_parent[2], to_child[2];
  if (pipe(to_parent) != 0 || pipe(to_child) != 0) fail_errno("pipe");
  const pid_t child = fork_child([&] {
    close(to_parent[0]);
    close(to_child[1]);
    std::vector<char> target(bytes, 0);
    const uintptr_t address = reinterpret_cast<uintptr_t>(target.data());
    if (write(to_parent[1], &address, sizeof address) != sizeof address) return 1;
    char byte;
    while (read(to_child[0], &byte, 1) > 0) {
    }
    return 0;
  });
  close(to_parent[1]);
  close(to_child[0]);
  uintptr_t address = 0;
  if (read(to_parent[0], &address, sizeof address) != sizeof address) fail("the child did not start");

  std::vector<char> source(bytes, 'x');
  const iovec local{source.data(), bytes};
  const iovec remote{reinterpret_cast<void*>(address), bytes};
  auto copy = [&] {
    if (process_vm_writev(child, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(bytes))
      fail_errno("process_vm_writev");
  };
  const uint64_t copies = calibrate(copy);
  std::vector<double> gbps;
  std::vector<double> call_us;
  for (int batch = 0; batch < kBatches; ++batch) {
    const auto begin = Clock::now();
    for (uint64_t k = 0; k < copies; ++k) copy();
    const double seconds = seconds_since(begin);
    gbps.push_back(static_cast<double>(bytes * copies) / seconds / 1e9);
    call_us.push_back(seconds * 1e6 / static_cast<double>(copies));
  }
  close(to_child[1]);
  reap(child);
  print_spread("gbps", gbps);
  std::printf(" ");
  print_spread("call_us", call_us);
  std::printf(" bytes=%zu\n", bytes);
}

uint64_t parse_count(const char* text, const char* what) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value == 0) fail(std::string("bad ") + what + ": " + text);
  return value;
}

void usage() {
  std::fprintf(stderr,
               "usage: bench_limits hop ITERATIONS | stalls ITERATIONS | futex ITERATIONS | faults PAGES |"
               " memcpy BYTES | cma BYTES\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    usage();
    return 2;
  }
  const std::string_view mode = argv[1];
  if (mode == "hop") {
    hop(parse_count(argv[2], "iteration count"));
  } else if (mode == "stalls") {
    stalls(parse_count(argv[2], "iteration count"));
  } else if (mode == "futex") {
    futex_hop(parse_count(argv[2], "iteration count"));
  } else if (mode == "faults") {
    first_touch_faults(parse_count(argv[2], "page count"));
  } else if (mode == "memcpy") {
    memcpy_bandwidth(parse_count(argv[2], "size"));
  } else if (mode == "cma") {
    cma_bandwidth(parse_count(argv[2], "size"));
  } else {
    usage();
    return 2;
  }
  return 0;
}
