// soak: one pair of processes exchanges checked messages for a long time
// (under SOFTVERBS_FAULTS, with loss, duplicates, reordering and
// corruption) while each side samples what it holds: resident memory, open
// fds, and the run's segments in /dev/shm. It passes when both sides end
// intact and, from the end of the warm-up to the end of the run, fds and
// segments did not change and resident memory grew by less than the slack
// (not checked in sanitizer builds, whose memory grows by design).
//
//   SOFTVERBS_SHM_PREFIX=NAME softverbs run -- soak [--seconds S]
//       [--size BYTES] [--slack-kib K] [--device NAME]
//       [--hosts NETNS_A,NETNS_B --gid-index N]
//
// With --hosts, the two sides run on two hosts of `softverbs topo`: each
// enters its network namespace (/run/netns/NAME, root) and takes a registry
// of its own (SOFTVERBS_SHM_PREFIX=NAME-NETNS) before it opens a device,
// and they connect from GID N (a RoCE device's address) over the UDP wire.
//
// Bounded in CI; `soak --seconds 3600` is the hour-long run.
#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/load/pair_traffic.h"
#include "harness/load/shm_leftovers.h"
#include "harness/testsupport/soft_control.h"

namespace softverbs::load {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int seconds = 20;
  uint32_t size = 4096;
  long slack_kib = 4096;
  std::string device = "softverbs0";
  std::string hosts[2];  // network namespaces, or none
  uint8_t gid_index = 0;
};

// The registry prefix of a side on host `netns`.
std::string side_prefix(const std::string& netns) {
  const char* prefix = std::getenv("SOFTVERBS_SHM_PREFIX");
  return std::string(prefix ? prefix : "softverbs") + "-" + netns;
}

// Moves this process to another host before it touches a device.
void enter_host(const std::string& netns) {
  const int fd = open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    std::perror(("soak: entering network namespace " + netns).c_str());
    std::exit(static_cast<int>(PairOutcome::kCleanError));
  }
  close(fd);
  setenv("SOFTVERBS_SHM_PREFIX", side_prefix(netns).c_str(), 1);
}

// Under a sanitizer, resident memory grows by the sanitizer's own design
// (ASan keeps freed blocks in quarantine, TSan grows its shadow): only the
// normal build's can show a leak.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kResidentMemoryIsTheProgramsOwn = false;
#else
constexpr bool kResidentMemoryIsTheProgramsOwn = true;
#endif

struct Holdings {
  long resident_kib = 0;
  size_t fds = 0;
  size_t segments = 0;
};

Holdings sample() {
  Holdings h;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmRSS:", 0) == 0) h.resident_kib = std::strtol(line.c_str() + 6, nullptr, 10);
  std::error_code ec;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec))
    ++h.fds;
  h.segments = shm_segments().size();
  return h;
}

// What one side held after the warm-up and at the end.
class HoldingsWatch {
 public:
  explicit HoldingsWatch(std::chrono::seconds warm_up)
      : thread_([this, warm_up] { watch(warm_up); }) {}
  ~HoldingsWatch() {
    done_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // Compared once the traffic has ended and the watch has stopped.
  bool flat(uint32_t side, long slack_kib) {
    done_.store(true);
    if (thread_.joinable()) thread_.join();
    std::printf("side %u: after warm-up %ld KiB, %zu fds, %zu segments; at the end %ld KiB, "
                "%zu fds, %zu segments\n", side, warm_.resident_kib, warm_.fds, warm_.segments,
                last_.resident_kib, last_.fds, last_.segments);
    if (!warmed_) {
      std::fprintf(stderr, "side %u: the run ended before the warm-up did\n", side);
      return false;
    }
    return last_.fds == warm_.fds && last_.segments == warm_.segments &&
           (!kResidentMemoryIsTheProgramsOwn || last_.resident_kib - warm_.resident_kib < slack_kib);
  }

 private:
  void watch(std::chrono::seconds warm_up) {
    const auto warm_at = Clock::now() + warm_up;
    while (!done_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (done_.load()) break;
      const Holdings now = sample();
      if (!warmed_ && Clock::now() >= warm_at) {
        warm_ = now;
        warmed_ = true;
      }
      if (warmed_) last_ = now;
    }
  }

  std::atomic<bool> done_{false};
  bool warmed_ = false;
  Holdings warm_, last_;
  std::thread thread_;
};

pid_t start_side(const Options& o, Rendezvous& r, uint32_t self) {
  const pid_t child = fork();
  if (child != 0) return child;
  if (!o.hosts[self].empty()) enter_host(o.hosts[self]);
  PairConfig c;
  c.device = o.device;
  c.gid_index = o.gid_index;
  c.self = self;
  c.peer = 1 - self;
  c.size = o.size;
  c.deadline = std::chrono::seconds(o.seconds + 120);
  bool flat = false;
  PairOutcome outcome;
  {
    PairTraffic traffic(c, r);
    // A fifth of the run, at least 2 s: every ring slot and buffer is
    // touched by then.
    HoldingsWatch watch(std::chrono::seconds(std::max(2, o.seconds / 5)));
    outcome = traffic.run();
    flat = watch.flat(self, o.slack_kib);
    std::printf("side %u: %s, %lu sent, %lu received\n", self, outcome_name(outcome),
                static_cast<unsigned long>(traffic.sent()),
                static_cast<unsigned long>(traffic.received()));
  }
  // Under a fault plan, the faults must have happened, or nothing was soaked.
  const bool faults_planned = std::getenv("SOFTVERBS_FAULTS") || std::getenv("SOFTVERBS_FAULTS_FILE");
  std::string stats;
  if (faults_planned && testsupport::soft_control("stats", stats) == 0) {
    for (const char* kind : {"dropped", "duplicated", "reordered", "corrupted"}) {
      const uint64_t n = testsupport::line_counter(stats, "faults tx:", kind).value_or(0);
      std::printf("side %u: %lu frames %s\n", self, static_cast<unsigned long>(n), kind);
      if (n == 0) flat = false;
    }
  }
  if (outcome == PairOutcome::kIntact && !flat) {
    std::fprintf(stderr, "side %u: what it held grew during the run, or a planned fault never "
                 "happened\n", self);
    std::exit(1);
  }
  std::exit(static_cast<int>(outcome));
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--seconds") o.seconds = std::atoi(value);
    else if (flag == "--size") o.size = std::strtoul(value, nullptr, 10);
    else if (flag == "--slack-kib") o.slack_kib = std::strtol(value, nullptr, 10);
    else if (flag == "--device") o.device = value;
    else if (flag == "--gid-index") o.gid_index = static_cast<uint8_t>(std::atoi(value));
    else if (flag == "--hosts") {
      const std::string both = value;
      const size_t comma = both.find(',');
      if (comma == std::string::npos) return false;
      o.hosts[0] = both.substr(0, comma);
      o.hosts[1] = both.substr(comma + 1);
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && o.seconds > 0 && o.size > 0 && o.slack_kib > 0;
}

}  // namespace
}  // namespace softverbs::load

int main(int argc, char** argv) {
  using namespace softverbs::load;
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: soak [--seconds S] [--size BYTES] [--slack-kib K] [--device NAME]\n"
                         "            [--hosts NETNS_A,NETNS_B --gid-index N]\n");
    return 2;
  }
  if (!require_own_shm_prefix("soak", ", so that its segments can be counted apart from other "
                                      "runs'"))
    return 2;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Rendezvous* r = Rendezvous::create();
  if (!r) return 1;
  const pid_t a = start_side(o, *r, 0);
  const pid_t b = start_side(o, *r, 1);
  std::this_thread::sleep_for(std::chrono::seconds(o.seconds));
  r->stop.store(true);
  int status_a = 0, status_b = 0;
  waitpid(a, &status_a, 0);  // each side ends by its own deadline
  waitpid(b, &status_b, 0);
  std::vector<std::string> left = shm_segments();
  for (const std::string& host : o.hosts)
    if (!host.empty())
      for (const std::string& path : shm_segments(side_prefix(host).c_str())) left.push_back(path);
  const bool ok = WIFEXITED(status_a) && WEXITSTATUS(status_a) == 0 && WIFEXITED(status_b) &&
                  WEXITSTATUS(status_b) == 0 && left.empty();
  for (const std::string& path : left) std::fprintf(stderr, "left in /dev/shm: %s\n", path.c_str());
  std::printf("soak: %s\n", ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}
