// scribbler: pairs of processes exchange checked messages on a soft device
// while another process of the same user writes garbage into their shared
// memory segments (the mailboxes each process receives frames in, and the
// host's registry), as a buggy or hostile program could. It passes when
// every side of every pair either ended intact or failed cleanly (a verb
// error or an error completion), none hung, none kept a wrong byte, and a
// fresh pair started afterwards runs intact.
//
//   SOFTVERBS_SHM_PREFIX=NAME softverbs run -- scribbler [--pairs N]
//       [--seconds S] [--targets mailboxes|registry|all] [--seed N]
//       [--size BYTES] [--device NAME]
//
// The prefix is required: the scribbler writes into every segment of it,
// and must never reach another run's.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness/load/pair_traffic.h"
#include "harness/load/processes.h"
#include "harness/load/shm_leftovers.h"

namespace softverbs::load {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  uint32_t pairs = 3;
  int seconds = 10;
  std::string targets = "all";
  uint32_t seed = 1;
  uint32_t size = 4096;
  std::string device = "softverbs0";
};

struct ScribbleCounts {
  uint64_t segments = 0;  // mappings written into
  uint64_t words = 0;     // aligned 8-byte words (ring counters, sequence words, locks)
  uint64_t bursts = 0;    // runs of random bytes (headers, payloads)
};

bool wanted(const std::string& path, const std::string& targets) {
  const bool registry = path.ends_with("registry");
  if (targets == "registry") return registry;
  if (targets == "mailboxes") return !registry;
  return true;
}

// One pass over every segment of the run: a few words and bursts each.
void scribble_once(const Options& o, std::mt19937_64& random, ScribbleCounts& counts) {
  for (const std::string& path : shm_segments()) {
    if (!wanted(path, o.targets)) continue;
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;  // gone already
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_size < 64) {
      ::close(fd);
      continue;
    }
    const auto size = static_cast<size_t>(st.st_size);
    void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) continue;
    auto* bytes = static_cast<uint8_t*>(map);
    // Mostly near the front, where the counters and the first slots are;
    // sometimes anywhere.
    auto offset = [&](size_t span) {
      const size_t limit = random() % 4 ? std::min<size_t>(size, 64 * 1024) : size;
      return static_cast<size_t>(random() % (limit - span + 1));
    };
    for (int i = 0; i < 4; ++i) {
      const uint64_t word = random() % 3 ? random() : (random() % 2 ? 0 : ~0ull);
      std::memcpy(bytes + (offset(8) & ~size_t{7}), &word, 8);
      ++counts.words;
    }
    for (int i = 0; i < 2; ++i) {
      const size_t length = 1 + random() % 256;
      uint8_t* at = bytes + offset(length);
      for (size_t b = 0; b < length; ++b) at[b] = static_cast<uint8_t>(random());
      ++counts.bursts;
    }
    ++counts.segments;
    munmap(map, size);
  }
}

[[noreturn]] void scribbler_process(const Options& o, Rendezvous& r) {
  std::mt19937_64 random(o.seed);
  ScribbleCounts counts;
  while (!r.stop.load()) {
    scribble_once(o, random, counts);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::printf("scribbler: %lu segment writes, %lu words, %lu bursts\n",
              static_cast<unsigned long>(counts.segments), static_cast<unsigned long>(counts.words),
              static_cast<unsigned long>(counts.bursts));
  std::fflush(stdout);
  _exit(counts.segments > 0 ? 0 : 1);  // a run that wrote nothing tested nothing
}

pid_t start_side(const Options& o, Rendezvous& r, uint32_t self, uint32_t peer,
                 uint32_t generation, uint64_t messages, uint8_t qp_timeout) {
  PairConfig c;
  c.device = o.device;
  c.self = self;
  c.peer = peer;
  c.generation = generation;
  c.size = o.size;
  c.messages = messages;
  c.qp_timeout = qp_timeout;
  c.deadline = std::chrono::seconds(o.seconds + 60);
  return fork_side(c, r, /*report=*/true);
}

// A child's exit code, or -1 when it was killed (at the deadline or by a
// signal).
int exit_code_by(pid_t pid, Clock::time_point deadline) {
  const std::optional<int> status = wait_until(pid, deadline);
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

bool acceptable(int status) {
  return status == static_cast<int>(PairOutcome::kIntact) ||
         status == static_cast<int>(PairOutcome::kCleanError);
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--pairs") o.pairs = std::strtoul(value, nullptr, 10);
    else if (flag == "--seconds") o.seconds = std::atoi(value);
    else if (flag == "--targets") o.targets = value;
    else if (flag == "--seed") o.seed = std::strtoul(value, nullptr, 10);
    else if (flag == "--size") o.size = std::strtoul(value, nullptr, 10);
    else if (flag == "--device") o.device = value;
    else return false;
  }
  return argc % 2 == 1 && o.pairs >= 1 && 2 * o.pairs + 2 <= kMaxProcesses && o.seconds > 0 &&
         o.size > 0 && (o.targets == "all" || o.targets == "mailboxes" || o.targets == "registry");
}

int run(const Options& o) {
  Rendezvous* r = Rendezvous::create();
  if (!r) return 1;
  std::vector<pid_t> sides;
  for (uint32_t p = 0; p < o.pairs; ++p) {
    // 67 ms ACK timeout: a frame the scribbler spoiled is soon sent again.
    sides.push_back(start_side(o, *r, 2 * p, 2 * p + 1, 1, 0, 14));
    sides.push_back(start_side(o, *r, 2 * p + 1, 2 * p, 1, 0, 14));
  }
  const pid_t scribbler = fork();
  if (scribbler == 0) scribbler_process(o, *r);
  std::this_thread::sleep_for(std::chrono::seconds(o.seconds));
  r->stop.store(true);
  const int scribbled = exit_code_by(scribbler, Clock::now() + std::chrono::seconds(10));
  bool ok = scribbled == 0;
  if (!ok) std::fprintf(stderr, "the scribbler wrote nothing (status %d)\n", scribbled);
  uint32_t intact = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(90);
  for (pid_t side : sides) {
    const int status = exit_code_by(side, deadline);
    if (status == 0) ++intact;
    if (!acceptable(status)) {
      std::fprintf(stderr, "a side ended %s\n",
                   status < 0 ? "killed at the deadline or by a signal"
                              : outcome_name(static_cast<PairOutcome>(status)));
      ok = false;
    }
  }
  std::printf("%u of %zu sides intact, the rest failed cleanly%s\n", intact, sides.size(),
              ok ? "" : " or NOT");
  // A fresh pair, after every victim has gone: it must be untouched by
  // whatever the scribbler left.
  const uint32_t a = 2 * o.pairs, b = a + 1;
  // 1 s: nothing spoils its frames, and a slow (sanitizer) build must not
  // look like loss.
  const pid_t fresh_a = start_side(o, *r, a, b, 2, 2000, 18);
  const pid_t fresh_b = start_side(o, *r, b, a, 2, 2000, 18);
  const auto fresh_deadline = Clock::now() + std::chrono::seconds(60);
  const int status_a = exit_code_by(fresh_a, fresh_deadline);
  const int status_b = exit_code_by(fresh_b, fresh_deadline);
  if (status_a != 0 || status_b != 0) {
    std::fprintf(stderr, "the fresh pair did not run intact (%d, %d)\n", status_a, status_b);
    ok = false;
  }
  for (const std::string& path : shm_segments()) {
    std::fprintf(stderr, "left in /dev/shm: %s\n", path.c_str());
    ok = false;
  }
  std::printf("scribbler run: %s\n", ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace softverbs::load

int main(int argc, char** argv) {
  using namespace softverbs::load;
  Options options;
  if (!parse(argc, argv, options)) {
    std::fprintf(stderr,
                 "usage: scribbler [--pairs N] [--seconds S] [--targets mailboxes|registry|all] "
                 "[--seed N] [--size BYTES] [--device NAME]\n");
    return 2;
  }
  if (!require_own_shm_prefix("scribbler", ": it writes garbage into every segment of that prefix"))
    return 2;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  return run(options);
}
