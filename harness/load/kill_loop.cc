// kill_loop: processes on a soft device are killed with SIGKILL at random
// moments (in the middle of opening the device, creating and destroying
// QPs, registering memory, or exchanging messages) while one pair of
// processes keeps exchanging checked messages beside them. It passes when
// that pair ends intact, every process whose peer was killed failed
// cleanly instead of hanging, a fresh pair started afterwards runs intact,
// and nothing is left in /dev/shm once every process has ended.
//
//   SOFTVERBS_SHM_PREFIX=NAME softverbs run -- kill_loop [--seconds S]
//       [--seed N] [--size BYTES] [--device NAME]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <infiniband/verbs.h>

#include "harness/load/pair_traffic.h"
#include "harness/load/processes.h"
#include "harness/load/shm_leftovers.h"

namespace softverbs::load {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int seconds = 15;
  uint32_t seed = 1;
  uint32_t size = 4096;
  std::string device = "softverbs0";
};

// A process that only makes and unmakes verbs objects, each of which
// changes the host's registry (attach, QPN allocation and release,
// detach), until it is killed.
[[noreturn]] void churn_objects(const std::string& device) {
  for (;;) {
    ibv_context* context = open_device_named(device);
    if (!context) _exit(3);
    ibv_pd* pd = ibv_alloc_pd(context);
    ibv_cq* cq = pd ? ibv_create_cq(context, 8, nullptr, nullptr, 0) : nullptr;
    std::vector<ibv_qp*> qps;
    static uint8_t memory[64 * 1024];
    ibv_mr* mr = pd ? ibv_reg_mr(pd, memory, sizeof memory, IBV_ACCESS_LOCAL_WRITE) : nullptr;
    for (int i = 0; cq && i < 4; ++i) {
      ibv_qp_init_attr init{};
      init.send_cq = init.recv_cq = cq;
      init.qp_type = IBV_QPT_RC;
      init.cap = {4, 4, 1, 1, 0};
      if (ibv_qp* qp = ibv_create_qp(pd, &init)) qps.push_back(qp);
    }
    for (ibv_qp* qp : qps) ibv_destroy_qp(qp);
    if (mr) ibv_dereg_mr(mr);
    if (cq) ibv_destroy_cq(cq);
    if (pd) ibv_dealloc_pd(pd);
    ibv_close_device(context);
  }
}

pid_t start_side(const Options& o, Rendezvous& r, uint32_t self, uint32_t peer,
                 uint32_t generation, uint64_t messages, uint8_t qp_timeout, int deadline_s) {
  PairConfig c;
  c.device = o.device;
  c.self = self;
  c.peer = peer;
  c.generation = generation;
  c.size = o.size;
  c.messages = messages;
  c.qp_timeout = qp_timeout;
  c.deadline = std::chrono::seconds(deadline_s);
  return fork_side(c, r, /*report=*/false);
}

// A process still to be reaped, and what it may end as.
struct Pending {
  pid_t pid;
  Clock::time_point deadline;
  bool may_fail_cleanly;
  const char* what;
};

class KillLoop {
 public:
  explicit KillLoop(const Options& o, Rendezvous& r) : o_(o), r_(r), random_(o.seed) {}

  bool run() {
    // 1 s ACK timeout: the steady pair must not take a busy host for loss.
    const pid_t steady_a = start_side(o_, r_, 0, 1, 1, 0, 18, o_.seconds + 120);
    const pid_t steady_b = start_side(o_, r_, 1, 0, 1, 0, 18, o_.seconds + 120);
    const auto end = Clock::now() + std::chrono::seconds(o_.seconds);
    while (Clock::now() < end) {
      if (random_() % 2) kill_a_churner();
      else kill_one_side_of_a_pair();
      reap(false);
    }
    r_.stop.store(true);
    pending_.push_back({steady_a, Clock::now() + std::chrono::seconds(90), false, "steady side"});
    pending_.push_back({steady_b, Clock::now() + std::chrono::seconds(90), false, "steady side"});
    reap(true);
    std::printf("%lu processes killed (%lu making objects, %lu exchanging messages); %lu "
                "survivors failed cleanly\n", static_cast<unsigned long>(killed_churners_ + killed_sides_),
                static_cast<unsigned long>(killed_churners_), static_cast<unsigned long>(killed_sides_),
                static_cast<unsigned long>(clean_failures_));
    return ok_ && fresh_pair_is_intact() && nothing_left();
  }

 private:
  std::chrono::milliseconds random_ms(int low, int high) {
    return std::chrono::milliseconds(low + static_cast<int>(random_() % (high - low + 1)));
  }

  void kill_a_churner() {
    const pid_t child = fork();
    if (child == 0) churn_objects(o_.device);
    std::this_thread::sleep_for(random_ms(1, 60));
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    ++killed_churners_;
  }

  void kill_one_side_of_a_pair() {
    const uint32_t a = next_index(), b = next_index();
    ++generation_;
    // 16 ms ACK timeout: the survivor learns of its peer's death soon.
    const pid_t side_a = start_side(o_, r_, a, b, generation_, 0, 12, 20);
    const pid_t side_b = start_side(o_, r_, b, a, generation_, 0, 12, 20);
    std::this_thread::sleep_for(random_ms(5, 150));
    const bool first = random_() % 2;
    kill(first ? side_a : side_b, SIGKILL);
    waitpid(first ? side_a : side_b, nullptr, 0);
    pending_.push_back({first ? side_b : side_a, Clock::now() + std::chrono::seconds(30), true,
                        "survivor of a killed peer"});
    ++killed_sides_;
  }

  uint32_t next_index() {
    const uint32_t index = 2 + next_++ % (kMaxProcesses - 4);
    return index;
  }

  // Reaps what has ended (`all`: waits for everything, killing at deadlines).
  void reap(bool all) {
    for (size_t i = 0; i < pending_.size();) {
      const Pending& p = pending_[i];
      std::optional<int> status;
      if (all) {
        status = wait_until(p.pid, p.deadline);
        if (!status) {
          std::fprintf(stderr, "a %s hung: killed at its deadline\n", p.what);
          ok_ = false;
        }
      } else {
        int raw = 0;
        const pid_t done = waitpid(p.pid, &raw, WNOHANG);
        if (done == 0) {
          ++i;
          continue;
        }
        if (done > 0) status = raw;
      }
      if (status) judge(p, *status);
      pending_.erase(pending_.begin() + static_cast<long>(i));
    }
  }

  void judge(const Pending& p, int status) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == static_cast<int>(PairOutcome::kIntact)) return;
    if (code == static_cast<int>(PairOutcome::kCleanError) && p.may_fail_cleanly) {
      ++clean_failures_;
      return;
    }
    std::fprintf(stderr, "a %s ended %s\n", p.what,
                 code < 0 ? "by a signal" : outcome_name(static_cast<PairOutcome>(code)));
    ok_ = false;
  }

  bool fresh_pair_is_intact() {
    const uint32_t a = next_index(), b = next_index();
    ++generation_;
    pending_.push_back({start_side(o_, r_, a, b, generation_, 2000, 18, 60),
                        Clock::now() + std::chrono::seconds(70), false, "fresh side"});
    pending_.push_back({start_side(o_, r_, b, a, generation_, 2000, 18, 60),
                        Clock::now() + std::chrono::seconds(70), false, "fresh side"});
    reap(true);
    return ok_;
  }

  bool nothing_left() {
    const std::vector<std::string> left = shm_segments();
    for (const std::string& path : left) std::fprintf(stderr, "left in /dev/shm: %s\n", path.c_str());
    return left.empty();
  }

  const Options& o_;
  Rendezvous& r_;
  std::mt19937_64 random_;
  std::vector<Pending> pending_;
  uint32_t next_ = 0;
  uint32_t generation_ = 1;
  uint64_t killed_churners_ = 0, killed_sides_ = 0, clean_failures_ = 0;
  bool ok_ = true;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--seconds") o.seconds = std::atoi(value);
    else if (flag == "--seed") o.seed = std::strtoul(value, nullptr, 10);
    else if (flag == "--size") o.size = std::strtoul(value, nullptr, 10);
    else if (flag == "--device") o.device = value;
    else return false;
  }
  return argc % 2 == 1 && o.seconds > 0 && o.size > 0;
}

}  // namespace
}  // namespace softverbs::load

int main(int argc, char** argv) {
  using namespace softverbs::load;
  Options options;
  if (!parse(argc, argv, options)) {
    std::fprintf(stderr, "usage: kill_loop [--seconds S] [--seed N] [--size BYTES] [--device NAME]\n");
    return 2;
  }
  if (!require_own_shm_prefix("kill_loop", ", so that what it leaves in /dev/shm can be told "
                                           "from other runs'"))
    return 2;
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Rendezvous* rendezvous = Rendezvous::create();
  if (!rendezvous) return 1;
  KillLoop loop(options, *rendezvous);
  const bool ok = loop.run();
  std::printf("kill loop: %s\n", ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}
