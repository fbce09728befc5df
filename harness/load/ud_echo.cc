// ud_echo: a two-process UD program that survives loss, for showing that
// a datagram run under a fault plan takes the same path from the same seed
// (harness/cli/trace_test.sh; docs/faults.md, Reproducibility).
//
// The client (a child process) sends numbered datagrams to the server one
// at a time; the server echoes each datagram it receives. The client waits
// for the echo of the number it sent, and sends the same number again when
// none came within --wait-ms: a datagram or its echo was lost. Which ones
// are lost is the fault plan's, decided from each datagram's identity, so
// the sends, the receives and the resends are the seed's; the wait only has
// to be long enough that an echo on its way is never taken for lost.
//
//   softverbs run [--seed N] -- ud_echo [--messages N] [--wait-ms MS]
//                                        [--device NAME] [--gid-index N]
//
// Prints "client: N echoes, R sends again" and exits 0 when every number
// came back; 1 when one did not after kMaxAttempts sends; 2 when the run
// itself could not be set up.
#include <infiniband/verbs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "harness/load/processes.h"
#include "harness/load/rendezvous.h"

namespace softverbs::load {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kReceives = 16;
constexpr uint32_t kQkey = 0x11111111;
constexpr uint32_t kMaxAttempts = 20;
constexpr int kSetupFailed = 2;

struct Options {
  uint32_t messages = 200;
  std::chrono::milliseconds wait{100};
  std::string device = "softverbs0";
  uint8_t gid_index = 0;
};

// A datagram's receive buffer: the GRH every UD receive starts with, then
// the number.
struct ReceiveSlot {
  ibv_grh grh;
  uint32_t number;
};

// One side's verbs objects: a UD QP, an address handle toward the other
// side, a receive slot per posted receive and one send slot.
class Side {
 public:
  bool open(const Options& o, uint32_t self, Rendezvous& r) {
    context_ = open_device_named(o.device);
    if (!context_) return fail("open " + o.device);
    pd_ = ibv_alloc_pd(context_);
    send_cq_ = ibv_create_cq(context_, kReceives, nullptr, nullptr, 0);
    receive_cq_ = ibv_create_cq(context_, kReceives, nullptr, nullptr, 0);
    if (!pd_ || !send_cq_ || !receive_cq_) return fail("ibv_alloc_pd/ibv_create_cq");
    mr_ = ibv_reg_mr(pd_, &buffers_, sizeof buffers_, IBV_ACCESS_LOCAL_WRITE);
    if (!mr_) return fail("ibv_reg_mr");
    ibv_qp_init_attr init{};
    init.send_cq = send_cq_;
    init.recv_cq = receive_cq_;
    init.qp_type = IBV_QPT_UD;
    init.cap = {kReceives, kReceives, 1, 1, 0};
    qp_ = ibv_create_qp(pd_, &init);
    if (!qp_) return fail("ibv_create_qp");
    ibv_port_attr port{};
    ibv_gid gid{};
    if (ibv_query_port(context_, 1, &port) || ibv_query_gid(context_, 1, o.gid_index, &gid))
      return fail("ibv_query_port/gid");
    Endpoint& me = r.endpoints[self];
    me.lid = port.lid;
    std::memcpy(me.gid, gid.raw, 16);
    me.qpn_toward[1 - self] = qp_->qp_num;
    return ready() || fail("ibv_modify_qp to INIT/RTR/RTS");
  }

  // The address handle toward the other side, once it has published.
  bool address(const Options& o, uint32_t self, const Rendezvous& r) {
    const Endpoint& peer = r.endpoints[1 - self];
    ibv_ah_attr a{};
    a.port_num = 1;
    a.dlid = peer.lid;
    if (peer.lid == 0) {  // RoCE: by GID
      a.is_global = 1;
      std::memcpy(a.grh.dgid.raw, peer.gid, 16);
      a.grh.hop_limit = 64;
      a.grh.sgid_index = o.gid_index;
    }
    ah_ = ibv_create_ah(pd_, &a);
    peer_qpn_ = peer.qpn_toward[self];
    return ah_ || fail("ibv_create_ah");
  }

  bool post_receive(uint32_t slot) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(&buffers_.receive[slot]), sizeof(ReceiveSlot),
                mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp_, &wr, &bad) == 0 || fail("ibv_post_recv");
  }

  // Sends `number` and waits for the send's completion.
  bool send(uint32_t number, Clock::time_point deadline) {
    buffers_.send = number;
    ibv_sge sge{reinterpret_cast<uintptr_t>(&buffers_.send), sizeof(uint32_t), mr_->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud = {ah_, peer_qpn_, kQkey};
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp_, &wr, &bad)) return fail("ibv_post_send");
    ibv_wc wc{};
    while (Clock::now() < deadline) {
      const int n = ibv_poll_cq(send_cq_, 1, &wc);
      if (n < 0) return fail("ibv_poll_cq");
      if (n == 1)
        return wc.status == IBV_WC_SUCCESS ||
               fail(std::string("send failed: ") + ibv_wc_status_str(wc.status));
    }
    return fail("no send completion before the deadline");
  }

  // True with the number of the next datagram received before `until`,
  // its receive posted again; false when none came (`failed` set as well
  // when a verb failed).
  bool receive(uint32_t& number, Clock::time_point until, bool& failed) {
    ibv_wc wc{};
    while (Clock::now() < until) {
      const int n = ibv_poll_cq(receive_cq_, 1, &wc);
      if (n < 0) return failed = !fail("ibv_poll_cq"), false;
      if (n == 0) continue;
      if (wc.status != IBV_WC_SUCCESS)
        return failed = !fail(std::string("receive failed: ") + ibv_wc_status_str(wc.status)),
               false;
      number = buffers_.receive[wc.wr_id].number;
      if (!post_receive(static_cast<uint32_t>(wc.wr_id))) return failed = true, false;
      return true;
    }
    return false;
  }

 private:
  bool ready() {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = kQkey;
    if (ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
      return false;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp_, &a, IBV_QP_STATE)) return false;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 1;
    return ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0;
  }

  bool fail(const std::string& what) {
    std::fprintf(stderr, "ud_echo: %s\n", what.c_str());
    return false;
  }

  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* receive_cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_ah* ah_ = nullptr;
  uint32_t peer_qpn_ = 0;
  struct {
    ReceiveSlot receive[kReceives];
    uint32_t send;
  } buffers_{};
};

// Each number until its echo comes back; 0 when all did, 1 when one never
// did.
int run_client(Side& side, const Options& o, Clock::time_point deadline) {
  uint32_t sent_again = 0;
  for (uint32_t number = 0; number < o.messages; ++number) {
    bool echoed = false;
    for (uint32_t attempt = 0; attempt < kMaxAttempts && !echoed; ++attempt) {
      if (attempt > 0) ++sent_again;
      if (!side.send(number, deadline)) return kSetupFailed;
      const Clock::time_point until = Clock::now() + o.wait;
      uint32_t echo = 0;
      bool failed = false;
      // An echo of an earlier number is one that was only late: skipped.
      while (!echoed && side.receive(echo, until, failed)) echoed = echo == number;
      if (failed) return kSetupFailed;
    }
    if (!echoed) {
      std::printf("FAIL: no echo of %u after %u sends\n", number, kMaxAttempts);
      return 1;
    }
  }
  std::printf("client: %u echoes, %u sends again\n", o.messages, sent_again);
  return 0;
}

// Echoes every datagram until the client is done.
int run_server(Side& side, Rendezvous& r, Clock::time_point deadline) {
  uint32_t echoed = 0;
  while (!r.stop.load() && Clock::now() < deadline) {
    uint32_t number = 0;
    bool failed = false;
    const Clock::time_point until = Clock::now() + std::chrono::milliseconds(10);
    if (side.receive(number, until, failed)) {
      if (!side.send(number, deadline)) return kSetupFailed;
      ++echoed;
    } else if (failed) {
      return kSetupFailed;
    }
  }
  std::printf("server: %u echoes sent\n", echoed);
  return 0;
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--messages" && has_value) {
      o.messages = static_cast<uint32_t>(std::strtoul(argv[++i], nullptr, 10));
    } else if (arg == "--wait-ms" && has_value) {
      o.wait = std::chrono::milliseconds(std::strtoul(argv[++i], nullptr, 10));
    } else if (arg == "--device" && has_value) {
      o.device = argv[++i];
    } else if (arg == "--gid-index" && has_value) {
      o.gid_index = static_cast<uint8_t>(std::strtoul(argv[++i], nullptr, 10));
    } else {
      std::fprintf(stderr,
                   "ud_echo: unknown argument '%s'\n"
                   "usage: softverbs run [--seed N] -- ud_echo [--messages N] [--wait-ms MS] "
                   "[--device NAME] [--gid-index N]\n",
                   argv[i]);
      return false;
    }
  }
  if (o.messages == 0 || o.wait.count() == 0) {
    std::fprintf(stderr, "ud_echo: --messages and --wait-ms take a number above 0\n");
    return false;
  }
  return true;
}

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) return kSetupFailed;
  Rendezvous* r = Rendezvous::create();
  if (!r) return kSetupFailed;
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(120);
  std::fflush(stdout);
  const pid_t client = fork();
  if (client < 0) return kSetupFailed;
  const uint32_t self = client == 0 ? 1 : 0;  // 0: the server (parent), 1: the client
  Side side;
  bool ready = side.open(o, self, *r) && r->barrier(1, 2, deadline) && side.address(o, self, *r);
  for (uint32_t slot = 0; ready && slot < kReceives; ++slot) ready = side.post_receive(slot);
  // Every receive of both sides is posted before the first datagram.
  if (!ready || !r->barrier(2, 2, deadline)) {
    r->failed.store(1);
    if (client == 0) _exit(kSetupFailed);
    wait_until(client, deadline);
    return kSetupFailed;
  }
  if (client == 0) {
    const int status = run_client(side, o, deadline);
    std::fflush(stdout);
    r->stop.store(true);
    _exit(status);
  }
  const int served = run_server(side, *r, deadline);
  const std::optional<int> status = wait_until(client, deadline);
  if (!status || !WIFEXITED(*status)) return kSetupFailed;
  return served != 0 ? served : WEXITSTATUS(*status);
}

}  // namespace
}  // namespace softverbs::load

int main(int argc, char** argv) { return softverbs::load::run(argc, argv); }
