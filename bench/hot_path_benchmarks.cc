// The hot paths of one process, without a peer process: what a busy-poll of
// an empty CQ costs, and one work request's whole trip (post, requester,
// wire, responder, acknowledgement, completer, poll) on a loopback pair of
// RC QPs. These isolate the per-call and per-WR software cost that the
// two-process figures of perftest add the cross-core hop to.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "bench/loopback.h"
#include "bench/peer_protocol.h"
#include "bench/rc_endpoint.h"

namespace softverbs::bench {
namespace {

constexpr uint32_t kMaxBytes = 1 << 16;

// A loopback pair: QP a sends or writes into QP b's half of one buffer.
class LoopbackPair {
 public:
  bool open(std::string& error) {
    context_ = open_device_named(benchmark_device_name(), error);
    if (!context_ || !port_.query(context_, error)) return false;
    pd_ = ibv_alloc_pd(context_);
    buffer_ = std::make_unique<char[]>(2 * kMaxBytes);
    mr_ = pd_ ? ibv_reg_mr(pd_, buffer_.get(), 2 * kMaxBytes,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
              : nullptr;
    cq_a_ = ibv_create_cq(context_, 64, nullptr, nullptr, 0);
    cq_b_ = ibv_create_cq(context_, 64, nullptr, nullptr, 0);
    if (!mr_ || !cq_a_ || !cq_b_) {
      error = "cannot allocate a PD, an MR and two CQs";
      return false;
    }
    qp_a_ = create_rc_qp(pd_, cq_a_, cq_a_, 16, error);
    qp_b_ = qp_a_ ? create_rc_qp(pd_, cq_b_, cq_b_, 16, error) : nullptr;
    return qp_b_ && connect_loopback(qp_a_, port_, qp_b_->qp_num, error) &&
           connect_loopback(qp_b_, port_, qp_a_->qp_num, error);
  }

  ~LoopbackPair() {
    if (qp_a_) ibv_destroy_qp(qp_a_);
    if (qp_b_) ibv_destroy_qp(qp_b_);
    if (cq_a_) ibv_destroy_cq(cq_a_);
    if (cq_b_) ibv_destroy_cq(cq_b_);
    if (mr_) ibv_dereg_mr(mr_);
    if (pd_) ibv_dealloc_pd(pd_);
    if (context_) ibv_close_device(context_);
  }

  bool post(ibv_wr_opcode opcode, uint32_t bytes) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.get()), bytes, mr_->lkey};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = opcode;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(buffer_.get() + kMaxBytes);
    wr.wr.rdma.rkey = mr_->rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp_a_, &wr, &bad) == 0;
  }

  bool post_recv_b(uint32_t bytes) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buffer_.get() + kMaxBytes), bytes, mr_->lkey};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp_b_, &wr, &bad) == 0;
  }

  // Waits for one successful completion on `cq`.
  static bool await(ibv_cq* cq) {
    ibv_wc wc;
    SpinDeadline deadline;
    int n;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
      if (deadline.expired()) return false;
    }
    return n == 1 && wc.status == IBV_WC_SUCCESS;
  }

  ibv_cq* cq_a() { return cq_a_; }
  ibv_cq* cq_b() { return cq_b_; }

 private:
  ibv_context* context_ = nullptr;
  LoopbackPort port_;
  ibv_pd* pd_ = nullptr;
  std::unique_ptr<char[]> buffer_;
  ibv_mr* mr_ = nullptr;
  ibv_cq* cq_a_ = nullptr;
  ibv_cq* cq_b_ = nullptr;
  ibv_qp* qp_a_ = nullptr;
  ibv_qp* qp_b_ = nullptr;
};

void hot_poll_cq_empty(benchmark::State& state) {
  LoopbackPair pair;
  std::string error;
  if (!pair.open(error)) {
    state.SkipWithError(error.c_str());
    return;
  }
  ibv_wc wc;
  for (auto _ : state) benchmark::DoNotOptimize(ibv_poll_cq(pair.cq_a(), 1, &wc));
}

void hot_write_loopback(benchmark::State& state) {
  const auto bytes = static_cast<uint32_t>(state.range(0));
  LoopbackPair pair;
  std::string error;
  if (!pair.open(error)) {
    state.SkipWithError(error.c_str());
    return;
  }
  for (auto _ : state) {
    if (!pair.post(IBV_WR_RDMA_WRITE, bytes) || !LoopbackPair::await(pair.cq_a())) {
      state.SkipWithError("the RDMA WRITE did not complete successfully");
      return;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
}

void hot_send_loopback(benchmark::State& state) {
  const auto bytes = static_cast<uint32_t>(state.range(0));
  LoopbackPair pair;
  std::string error;
  if (!pair.open(error)) {
    state.SkipWithError(error.c_str());
    return;
  }
  for (auto _ : state) {
    if (!pair.post_recv_b(bytes) || !pair.post(IBV_WR_SEND, bytes) || !LoopbackPair::await(pair.cq_b()) ||
        !LoopbackPair::await(pair.cq_a())) {
      state.SkipWithError("the SEND did not complete successfully on both sides");
      return;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * bytes);
}

BENCHMARK(hot_poll_cq_empty);
BENCHMARK(hot_write_loopback)->Arg(8)->Arg(4096)->Arg(kMaxBytes)->UseRealTime();
BENCHMARK(hot_send_loopback)->Arg(8)->Arg(4096)->UseRealTime();

}  // namespace
}  // namespace softverbs::bench
