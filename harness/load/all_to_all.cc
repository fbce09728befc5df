// all_to_all: N processes, each with one RC QP to every other, all sending
// at once, every byte checked; a load test of the host-wide pieces (the
// registry, the mailboxes, the QPN space) that two-process tests never
// stress. Runs on any verbs device, under `softverbs run` for soft ones.
//
//   all_to_all [--processes N] [--messages M] [--size BYTES] [--device NAME]
//              [--deadline SECONDS]
//
// Each process sends M messages of BYTES on each of its N-1 QPs; message k
// from process i to process j carries a pattern of (i, j, k), and lands in
// receive slot k of j's region for i (RC keeps a QP's messages in order).
// Exits 0 when every process completed every send and receive with the
// right bytes; each process prints its resident memory and open fds.
#include <infiniband/verbs.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harness/load/processes.h"
#include "harness/load/rc_connect.h"
#include "harness/load/rendezvous.h"
#include "harness/load/shm_leftovers.h"

namespace softverbs::load {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  uint32_t processes = 16;
  uint32_t messages = 32;
  uint32_t size = 4096;
  std::string device = "softverbs0";
  int deadline_seconds = 120;
};

uint8_t pattern_byte(uint32_t from, uint32_t to, uint32_t k, uint32_t offset) {
  return static_cast<uint8_t>(from * 131 + to * 31 + k * 7 + offset);
}

// One process of the mesh: its verbs objects and its part of the run.
class Participant {
 public:
  Participant(const Options& options, Rendezvous& rendezvous, uint32_t self)
      : o_(options), r_(rendezvous), self_(self), deadline_(Clock::now() + std::chrono::seconds(options.deadline_seconds)) {}
  ~Participant() { release(); }

  // The whole run; a message says what failed.
  bool run() {
    return open() && create_qps() && publish() && r_.barrier(1, o_.processes, deadline_) &&
           connect_and_post_receives() && r_.barrier(2, o_.processes, deadline_) &&
           send_all() && collect() && r_.barrier(3, o_.processes, deadline_) && report();
  }

 private:
  uint32_t peers() const { return o_.processes - 1; }
  uint64_t slot_bytes() const { return o_.size; }
  uint8_t* receive_slot(uint32_t from, uint32_t k) {
    return buffer_.data() + (uint64_t(from) * o_.messages + k) * slot_bytes();
  }
  uint8_t* send_slot(uint32_t to, uint32_t k) {
    return buffer_.data() + (uint64_t(o_.processes + to) * o_.messages + k) * slot_bytes();
  }

  bool fail(const char* what) {
    std::fprintf(stderr, "process %u: %s (errno %d: %s)\n", self_, what, errno, std::strerror(errno));
    r_.failed.fetch_add(1);
    return false;
  }

  bool open() {
    context_ = open_device_named(o_.device);
    if (!context_) return fail("no such device, or it did not open");
    ibv_port_attr port{};
    if (ibv_query_port(context_, 1, &port) != 0) return fail("ibv_query_port");
    lid_ = port.lid;
    mtu_ = port.active_mtu;
    if (ibv_query_gid(context_, 1, 0, &gid_) != 0) return fail("ibv_query_gid");
    pd_ = ibv_alloc_pd(context_);
    const int depth = static_cast<int>(peers() * o_.messages);
    send_cq_ = ibv_create_cq(context_, depth, nullptr, nullptr, 0);
    recv_cq_ = ibv_create_cq(context_, depth, nullptr, nullptr, 0);
    buffer_.assign(uint64_t(2) * o_.processes * o_.messages * slot_bytes(), 0);
    if (!pd_ || !send_cq_ || !recv_cq_) return fail("PD or CQ");
    mr_ = ibv_reg_mr(pd_, buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE);
    return mr_ ? true : fail("ibv_reg_mr");
  }

  bool create_qps() {
    qps_.assign(o_.processes, nullptr);
    for (uint32_t peer = 0; peer < o_.processes; ++peer) {
      if (peer == self_) continue;
      ibv_qp_init_attr init{};
      init.send_cq = send_cq_;
      init.recv_cq = recv_cq_;
      init.qp_type = IBV_QPT_RC;
      init.cap = {o_.messages, o_.messages, 1, 1, 0};
      qps_[peer] = ibv_create_qp(pd_, &init);
      if (!qps_[peer]) return fail("ibv_create_qp");
    }
    return true;
  }

  bool publish() {
    Endpoint& mine = r_.endpoints[self_];
    mine.lid = lid_;
    std::memcpy(mine.gid, gid_.raw, sizeof mine.gid);
    for (uint32_t peer = 0; peer < o_.processes; ++peer)
      if (qps_[peer]) mine.qpn_toward[peer] = qps_[peer]->qp_num;
    return true;
  }

  bool connect(ibv_qp* qp, uint32_t peer) {
    const Endpoint& remote = r_.endpoints[peer];
    const char* step = nullptr;
    // 1 s: a busy two-core host must not look like a lost packet.
    if (int err = connect_rc(qp, mtu_, {remote.lid, remote.gid, remote.qpn_toward[self_]}, 18,
                             step)) {
      errno = err;
      return fail(step);
    }
    return true;
  }

  bool connect_and_post_receives() {
    for (uint32_t peer = 0; peer < o_.processes; ++peer) {
      if (!qps_[peer]) continue;
      if (!connect(qps_[peer], peer)) return false;
      for (uint32_t k = 0; k < o_.messages; ++k) {
        ibv_sge sge{reinterpret_cast<uintptr_t>(receive_slot(peer, k)), o_.size, mr_->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = uint64_t(peer) << 32 | k;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (ibv_post_recv(qps_[peer], &wr, &bad)) return fail("ibv_post_recv");
      }
    }
    return true;
  }

  bool send_all() {
    for (uint32_t k = 0; k < o_.messages; ++k) {
      for (uint32_t peer = 0; peer < o_.processes; ++peer) {
        if (!qps_[peer]) continue;
        uint8_t* data = send_slot(peer, k);
        for (uint32_t b = 0; b < o_.size; ++b) data[b] = pattern_byte(self_, peer, k, b);
        ibv_sge sge{reinterpret_cast<uintptr_t>(data), o_.size, mr_->lkey};
        ibv_send_wr wr{};
        wr.wr_id = uint64_t(peer) << 32 | k;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(qps_[peer], &wr, &bad)) return fail("ibv_post_send");
      }
    }
    return true;
  }

  bool check(const ibv_wc& wc, bool received) {
    if (wc.status != IBV_WC_SUCCESS) {
      std::fprintf(stderr, "process %u: %s completion %s\n", self_, received ? "receive" : "send",
                   ibv_wc_status_str(wc.status));
      r_.failed.fetch_add(1);
      return false;
    }
    if (!received) return true;
    const auto peer = static_cast<uint32_t>(wc.wr_id >> 32);
    const auto k = static_cast<uint32_t>(wc.wr_id);
    const uint8_t* data = receive_slot(peer, k);
    for (uint32_t b = 0; b < o_.size; ++b)
      if (wc.byte_len != o_.size || data[b] != pattern_byte(peer, self_, k, b)) {
        std::fprintf(stderr, "process %u: message %u from %u wrong at byte %u\n", self_, k, peer, b);
        r_.failed.fetch_add(1);
        return false;
      }
    return true;
  }

  bool collect() {
    const uint64_t expected = uint64_t(peers()) * o_.messages;
    uint64_t sent = 0, received = 0;
    ibv_wc wc[32];
    while (sent < expected || received < expected) {
      if (Clock::now() > deadline_ || r_.failed.load()) return fail("completions missing at the deadline");
      int n = ibv_poll_cq(send_cq_, 32, wc);
      for (int i = 0; i < n; ++i, ++sent)
        if (!check(wc[i], false)) return false;
      int m = ibv_poll_cq(recv_cq_, 32, wc);
      for (int i = 0; i < m; ++i, ++received)
        if (!check(wc[i], true)) return false;
      if (n <= 0 && m <= 0) sched_yield();
    }
    return true;
  }

  bool report() {
    long resident_kib = 0;
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmRSS:", 0) == 0) resident_kib = std::strtol(line.c_str() + 6, nullptr, 10);
    size_t fds = 0;
    for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++fds;
    std::printf("process %u: %u QPs, %lu messages each way, %ld KiB resident, %zu fds\n", self_,
                peers(), static_cast<unsigned long>(uint64_t(peers()) * o_.messages), resident_kib, fds);
    return true;
  }

  void release() {
    for (ibv_qp* qp : qps_)
      if (qp) ibv_destroy_qp(qp);
    if (mr_) ibv_dereg_mr(mr_);
    if (send_cq_) ibv_destroy_cq(send_cq_);
    if (recv_cq_) ibv_destroy_cq(recv_cq_);
    if (pd_) ibv_dealloc_pd(pd_);
    if (context_) ibv_close_device(context_);
  }

  const Options& o_;
  Rendezvous& r_;
  const uint32_t self_;
  const Clock::time_point deadline_;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<ibv_qp*> qps_;
  std::vector<uint8_t> buffer_;
  uint16_t lid_ = 0;
  ibv_gid gid_{};
  ibv_mtu mtu_ = IBV_MTU_1024;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    const char* value = argv[++i];
    if (flag == "--processes") o.processes = std::strtoul(value, nullptr, 10);
    else if (flag == "--messages") o.messages = std::strtoul(value, nullptr, 10);
    else if (flag == "--size") o.size = std::strtoul(value, nullptr, 10);
    else if (flag == "--device") o.device = value;
    else if (flag == "--deadline") o.deadline_seconds = std::atoi(value);
    else return false;
  }
  return o.processes >= 2 && o.processes <= kMaxProcesses && o.messages >= 1 && o.size >= 1 &&
         o.deadline_seconds > 0;
}

// Forks the processes, waits for them (killing them all at the deadline),
// and returns how many failed.
int run_mesh(const Options& o, Rendezvous& rendezvous) {
  std::vector<pid_t> children;
  for (uint32_t i = 0; i < o.processes; ++i) {
    const pid_t child = fork();
    if (child == 0) {
      bool ok = false;
      {
        Participant participant(o, rendezvous, i);
        ok = participant.run();
      }
      std::exit(ok ? 0 : 1);  // not _exit: the library leaves /dev/shm as a program does
    }
    children.push_back(child);
  }
  int failures = 0;
  const auto deadline = Clock::now() + std::chrono::seconds(o.deadline_seconds + 10);
  for (pid_t child : children) {
    int status = 0;
    while (waitpid(child, &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        for (pid_t c : children) kill(c, SIGKILL);
        waitpid(child, &status, 0);
        break;
      }
      usleep(10000);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  return failures;
}

}  // namespace
}  // namespace softverbs::load

int main(int argc, char** argv) {
  using namespace softverbs::load;
  Options options;
  if (!parse(argc, argv, options)) {
    std::fprintf(stderr,
                 "usage: all_to_all [--processes 2..%u] [--messages M] [--size BYTES] "
                 "[--device NAME] [--deadline SECONDS]\n",
                 kMaxProcesses);
    return 2;
  }
  Rendezvous* rendezvous = Rendezvous::create();
  if (!rendezvous) return 1;
  const auto started = Clock::now();
  const int failures = run_mesh(options, *rendezvous);
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  const uint64_t messages =
      uint64_t(options.processes) * (options.processes - 1) * options.messages;
  std::printf("%u processes, %u QPs, %lu messages of %u bytes in %.2f s (%.0f messages/s): %s\n",
              options.processes, options.processes * (options.processes - 1),
              static_cast<unsigned long>(messages), options.size, seconds, messages / seconds,
              failures == 0 ? "all arrived intact" : "FAILED");
  if (failures) std::fprintf(stderr, "%d of %u processes failed\n", failures, options.processes);
  const std::vector<std::string> leftovers = shm_segments();
  for (const std::string& path : leftovers) std::fprintf(stderr, "left in /dev/shm: %s\n", path.c_str());
  return failures == 0 && leftovers.empty() ? 0 : 1;
}
