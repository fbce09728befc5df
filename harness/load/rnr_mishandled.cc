// rnr_mishandled: a program with a bug seeded on purpose, for showing that a
// failure seen under a fault plan is had again from the seed its run
// printed (docs/faults.md, Reproducibility).
//
// A client (a child process) sends numbered messages to the server, one at
// a time, with rnr_retry=1; the server keeps 16 receives posted, and the
// client sends the next message only once the server has posted again the
// receive the last one used (it tells the client how many it posted
// through shared memory, as a real program would through credits in its
// messages). So no SEND ever meets an empty receive queue, however the
// host schedules the two: without faults the program always passes. The bug: the client
// takes IBV_WC_RNR_RETRY_EXC_ERR for "the server has had enough" and stops
// as if done, so the messages after it never arrive and the server, which
// checks what it got, fails. Under a plan with an rnr rule (rnr:p=0.15),
// whether and where that happens is the seed's.
//
//   softverbs run [--seed N] -- rnr_mishandled [--messages N] [--device NAME]
//
// Exit status 0 when the server got every message, 1 when it did not (it
// says which), 2 when the run itself could not be set up.
#include <infiniband/verbs.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>

#include "harness/load/processes.h"
#include "harness/load/rc_connect.h"
#include "harness/load/rendezvous.h"

namespace softverbs::load {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kReceives = 16;
constexpr uint32_t kEndOfStream = 0xffffffff;
constexpr int kSetupFailed = 2;

// What the server tells the client beside the verbs: receives posted again.
struct Credits {
  std::atomic<uint32_t> reposted{0};

  // Made before fork(): both processes see the same memory.
  static Credits* create() {
    void* memory = mmap(nullptr, sizeof(Credits), PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return memory == MAP_FAILED ? nullptr : new (memory) Credits();
  }
};

struct Options {
  uint32_t messages = 50;
  std::string device = "softverbs0";
};

// One side's verbs objects: a QP toward the other side, a buffer of one
// message-sized slot per receive (the client uses slot 0).
class Side {
 public:
  bool open(const Options& o, uint32_t self, Rendezvous& r) {
    context_ = open_device_named(o.device);
    if (!context_) return fail("open " + o.device);
    pd_ = ibv_alloc_pd(context_);
    cq_ = ibv_create_cq(context_, 2 * kReceives, nullptr, nullptr, 0);
    if (!pd_ || !cq_) return fail("ibv_alloc_pd/ibv_create_cq");
    mr_ = ibv_reg_mr(pd_, slots_, sizeof slots_, IBV_ACCESS_LOCAL_WRITE);
    if (!mr_) return fail("ibv_reg_mr");
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq_;
    init.qp_type = IBV_QPT_RC;
    init.cap = {kReceives, kReceives, 1, 1, 0};
    qp_ = ibv_create_qp(pd_, &init);
    if (!qp_) return fail("ibv_create_qp");
    ibv_port_attr port{};
    ibv_gid gid{};
    if (ibv_query_port(context_, 1, &port) || ibv_query_gid(context_, 1, 0, &gid))
      return fail("ibv_query_port/gid");
    Endpoint& me = r.endpoints[self];
    me.lid = port.lid;
    std::memcpy(me.gid, gid.raw, 16);
    me.qpn_toward[1 - self] = qp_->qp_num;
    mtu_ = port.active_mtu;
    return true;
  }

  bool connect(uint32_t self, Rendezvous& r) {
    const Endpoint& peer = r.endpoints[1 - self];
    const char* failed = "";
    // rnr_retry=1: one RNR NAK is waited out, a second in a row fails the SEND.
    if (int err = connect_rc(qp_, mtu_, RcPeer{peer.lid, peer.gid, peer.qpn_toward[self], 0},
                             /*timeout=*/14, failed, /*rnr_retry=*/1))
      return fail(std::string("ibv_modify_qp to ") + failed + ": " + std::strerror(err));
    return true;
  }

  bool post_receive(uint32_t slot) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(&slots_[slot]), sizeof(uint32_t), mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp_, &wr, &bad) == 0 || fail("ibv_post_recv");
  }

  bool send(uint32_t number) {
    slots_[0] = number;
    ibv_sge sge{reinterpret_cast<uintptr_t>(&slots_[0]), sizeof(uint32_t), mr_->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp_, &wr, &bad) == 0 || fail("ibv_post_send");
  }

  // The next completion, or false at the deadline.
  bool next_completion(ibv_wc& wc, Clock::time_point deadline) {
    while (Clock::now() < deadline) {
      const int n = ibv_poll_cq(cq_, 1, &wc);
      if (n < 0) return fail("ibv_poll_cq");
      if (n == 1) return true;
    }
    return fail("no completion before the deadline");
  }

  uint32_t slot(uint64_t wr_id) const { return slots_[wr_id]; }
  ibv_cq* cq() const { return cq_; }

 private:
  bool fail(const std::string& what) {
    std::fprintf(stderr, "rnr_mishandled: %s\n", what.c_str());
    return false;
  }

  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mtu mtu_ = IBV_MTU_1024;
  uint32_t slots_[kReceives] = {};
};

// The client's loop, bug included.
bool run_client(Side& side, const Options& o, Credits& credits, Clock::time_point deadline) {
  for (uint32_t number = 0; number < o.messages; ++number) {
    // Every receive the earlier messages used is posted again.
    while (credits.reposted.load(std::memory_order_acquire) < number)
      if (Clock::now() > deadline) return false;
    if (!side.send(number)) return false;
    ibv_wc wc{};
    if (!side.next_completion(wc, deadline)) return false;
    if (wc.status == IBV_WC_RNR_RETRY_EXC_ERR) {
      // THE BUG: the server ran out of receives, so it must be full: stop
      // as if done. (Right: the message was not delivered; reconnect and
      // send it again, or give up loudly.)
      std::printf("client: server busy at message %u, stopping\n", number);
      return true;
    }
    if (wc.status != IBV_WC_SUCCESS) {
      std::printf("client: message %u failed: %s\n", number, ibv_wc_status_str(wc.status));
      return false;
    }
  }
  if (!side.send(kEndOfStream)) return false;
  ibv_wc wc{};
  return side.next_completion(wc, deadline) && wc.status == IBV_WC_SUCCESS;
}

// The server checks that every message arrives, in order, until the end
// of the stream, or until the client has exited and nothing more comes.
// 0 when all came, 1 when not.
int run_server(Side& side, const Options& o, Credits& credits, Clock::time_point deadline,
               pid_t client) {
  uint32_t expected = 0;
  bool client_exited = false;
  int client_status = 0;
  Clock::time_point quiet_since = Clock::now();
  while (Clock::now() < deadline) {
    ibv_wc wc{};
    const int n = ibv_poll_cq(side.cq(), 1, &wc);
    if (n < 0) return kSetupFailed;
    if (n == 0) {
      if (!client_exited && waitpid(client, &client_status, WNOHANG) == client) {
        client_exited = true;
        quiet_since = Clock::now();
      }
      // What the client sent before it exited arrived long ago.
      if (client_exited && Clock::now() - quiet_since > std::chrono::milliseconds(200)) break;
      continue;
    }
    if (wc.status != IBV_WC_SUCCESS) {
      std::printf("server: receive failed: %s\n", ibv_wc_status_str(wc.status));
      return 1;
    }
    const uint32_t number = side.slot(wc.wr_id);
    if (number == kEndOfStream) break;
    if (number != expected) {
      std::printf("server: message %u arrived where %u was due\n", number, expected);
      return 1;
    }
    ++expected;
    if (!side.post_receive(static_cast<uint32_t>(wc.wr_id))) return kSetupFailed;
    credits.reposted.fetch_add(1, std::memory_order_release);
  }
  if (!client_exited && !wait_until(client, deadline)) return kSetupFailed;
  if (expected != o.messages) {
    std::printf("FAIL: the server got %u of %u messages\n", expected, o.messages);
    return 1;
  }
  std::printf("server: all %u messages arrived in order\n", o.messages);
  return 0;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--messages" && i + 1 < argc) {
      o.messages = static_cast<uint32_t>(std::strtoul(argv[++i], nullptr, 10));
    } else if (arg == "--device" && i + 1 < argc) {
      o.device = argv[++i];
    } else {
      std::fprintf(stderr,
                   "rnr_mishandled: unknown argument '%s'\n"
                   "usage: softverbs run [--seed N] -- rnr_mishandled [--messages N] "
                   "[--device NAME]\n",
                   argv[i]);
      return false;
    }
  }
  return o.messages > 0;
}

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return kSetupFailed;
  Rendezvous* r = Rendezvous::create();
  Credits* credits = Credits::create();
  if (!r || !credits) return kSetupFailed;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(60);
  std::fflush(stdout);
  const pid_t client = fork();
  if (client < 0) return kSetupFailed;
  const uint32_t self = client == 0 ? 1 : 0;  // 0: the server (parent), 1: the client
  Side side;
  if (!side.open(o, self, *r) || !r->barrier(1, 2, deadline) || !side.connect(self, *r)) {
    r->failed.store(1);
    if (client == 0) _exit(kSetupFailed);
    wait_until(client, deadline);
    return kSetupFailed;
  }
  if (client == 0) {
    // The server posts its receives before the second barrier.
    if (!r->barrier(2, 2, deadline)) _exit(kSetupFailed);
    const bool ran = run_client(side, o, *credits, deadline);
    std::fflush(stdout);
    _exit(ran ? 0 : 1);
  }
  for (uint32_t slot = 0; slot < kReceives; ++slot)
    if (!side.post_receive(slot)) return kSetupFailed;
  if (!r->barrier(2, 2, deadline)) return kSetupFailed;
  return run_server(side, o, *credits, deadline, client);
}

}  // namespace
}  // namespace softverbs::load

int main(int argc, char** argv) { return softverbs::load::run(argc, argv); }
