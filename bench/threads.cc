// bench_threads: T threads of one verbs context, each with its own loopback
// pair of RC QPs, its own CQs and its own memory region, stream RDMA WRITEs
// (or SENDs, with OPCODE `send`: each thread also takes its own receives
// and posts them again) of BYTES bytes as fast as they can for SECONDS
// seconds. The bench runs it
// with T = 1 and T > 1 side by side: a provider whose threads don't get in
// each other's way gives T times the message rate of one thread.
// Public verbs API only; run it under `softverbs run --`.
//
// Output on stdout, key=value pairs: threads, seconds, messages, rate (all
// threads, messages per second) and per_thread (rate / threads).
#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/loopback.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace softverbs::bench;

// WRITEs each thread keeps in flight: enough to hide the per-WR round trip
// through the responder, few enough to leave the send queue room.
constexpr int kWindow = 32;
constexpr uint32_t kDepth = 2 * kWindow;
constexpr auto kWarmUp = std::chrono::milliseconds(300);

struct Lane {
  ibv_cq* cq_a = nullptr;
  ibv_cq* cq_b = nullptr;
  ibv_qp* qp_a = nullptr;
  ibv_qp* qp_b = nullptr;
  ibv_mr* mr = nullptr;
  std::unique_ptr<char[]> buffer;
  std::atomic<uint64_t> completed{0};
  std::string error;
};

bool open_lane(ibv_context* context, ibv_pd* pd, const LoopbackPort& port, uint32_t bytes, Lane& lane) {
  lane.buffer = std::make_unique<char[]>(2 * bytes);
  lane.mr = ibv_reg_mr(pd, lane.buffer.get(), 2 * bytes,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  lane.cq_a = ibv_create_cq(context, 2 * kDepth, nullptr, nullptr, 0);
  lane.cq_b = ibv_create_cq(context, 2 * kDepth, nullptr, nullptr, 0);
  if (!lane.mr || !lane.cq_a || !lane.cq_b) {
    lane.error = "cannot register memory or create CQs";
    return false;
  }
  lane.qp_a = create_rc_qp(pd, lane.cq_a, lane.cq_a, kDepth, lane.error);
  lane.qp_b = lane.qp_a ? create_rc_qp(pd, lane.cq_b, lane.cq_b, kDepth, lane.error) : nullptr;
  return lane.qp_b && connect_loopback(lane.qp_a, port, lane.qp_b->qp_num, lane.error) &&
         connect_loopback(lane.qp_b, port, lane.qp_a->qp_num, lane.error);
}

void close_lane(Lane& lane) {
  if (lane.qp_a) ibv_destroy_qp(lane.qp_a);
  if (lane.qp_b) ibv_destroy_qp(lane.qp_b);
  if (lane.cq_a) ibv_destroy_cq(lane.cq_a);
  if (lane.cq_b) ibv_destroy_cq(lane.cq_b);
  if (lane.mr) ibv_dereg_mr(lane.mr);
}

// A receive into the second half of the lane's buffer.
bool post_receive(Lane& lane, uint32_t bytes) {
  return post_one_receive(lane.qp_b, lane.buffer.get() + bytes, bytes, lane.mr->lkey, lane.error);
}

// The receiving QP's completions, each receive posted again.
bool take_receives(Lane& lane, uint32_t bytes) {
  ibv_wc received[kWindow];
  const int n = ibv_poll_cq(lane.cq_b, kWindow, received);
  if (n < 0) {
    lane.error = "ibv_poll_cq failed";
    return false;
  }
  for (int i = 0; i < n; ++i) {
    if (received[i].status != IBV_WC_SUCCESS) {
      lane.error = std::string("receive with status ") + ibv_wc_status_str(received[i].status);
      return false;
    }
    if (!post_receive(lane, bytes)) return false;
  }
  return true;
}

// Streams WRITEs (SENDs) from the first half of the lane's buffer to the
// second until `stop`; counts completions in lane.completed.
void stream(Lane& lane, uint32_t bytes, bool sends, const std::atomic<bool>& stop) {
  if (sends)
    for (uint32_t i = 0; i < kDepth; ++i)
      if (!post_receive(lane, bytes)) return;
  ibv_sge sge{reinterpret_cast<uintptr_t>(lane.buffer.get()), bytes, lane.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = sends ? IBV_WR_SEND : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(lane.buffer.get() + bytes);
  wr.wr.rdma.rkey = lane.mr->rkey;
  int outstanding = 0;
  ibv_wc completions[kWindow];
  auto last_progress = Clock::now();
  while (!stop.load(std::memory_order_relaxed)) {
    while (outstanding < kWindow) {
      ibv_send_wr* bad = nullptr;
      if (int rc = ibv_post_send(lane.qp_a, &wr, &bad)) {
        lane.error = "ibv_post_send failed with " + std::to_string(rc);
        return;
      }
      ++outstanding;
    }
    const int done = ibv_poll_cq(lane.cq_a, kWindow, completions);
    if (done < 0) {
      lane.error = "ibv_poll_cq failed";
      return;
    }
    if (sends && !take_receives(lane, bytes)) return;
    for (int i = 0; i < done; ++i) {
      if (completions[i].status != IBV_WC_SUCCESS) {
        lane.error = std::string("completion with status ") + ibv_wc_status_str(completions[i].status);
        return;
      }
    }
    if (done > 0) {
      outstanding -= done;
      lane.completed.fetch_add(static_cast<uint64_t>(done), std::memory_order_relaxed);
      last_progress = Clock::now();
    } else if (Clock::now() - last_progress > std::chrono::seconds(30)) {
      lane.error = "no completion for 30 s";
      return;
    }
  }
  // Drain, so the QPs are destroyed with nothing in flight.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (outstanding > 0 && Clock::now() < deadline) {
    const int done = ibv_poll_cq(lane.cq_a, kWindow, completions);
    if (done < 0) break;
    outstanding -= done;
    if (sends && !take_receives(lane, bytes)) break;
  }
}

uint64_t total_completed(const std::vector<std::unique_ptr<Lane>>& lanes) {
  uint64_t total = 0;
  for (const auto& lane : lanes) total += lane->completed.load(std::memory_order_relaxed);
  return total;
}

int fail(const std::string& what) {
  std::fprintf(stderr, "bench_threads: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr,
                 "usage: bench_threads THREADS SECONDS [BYTES [write|send]]   (under `softverbs run --`)\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const double seconds = std::atof(argv[2]);
  const long bytes = argc >= 4 ? std::atol(argv[3]) : 8;
  const std::string opcode = argc == 5 ? argv[4] : "write";
  if (threads < 1 || threads > 256 || seconds <= 0 || bytes < 1 || bytes > (1 << 30))
    return fail("THREADS must be 1..256, SECONDS > 0, BYTES 1..2^30");
  if (opcode != "write" && opcode != "send")
    return fail("the opcode is `write` or `send`, not `" + opcode + "`");
  const bool sends = opcode == "send";

  const char* device = std::getenv("SOFTVERBS_BENCH_DEVICE");
  std::string error;
  ibv_context* context = open_device_named(device && *device ? device : "softverbs0", error);
  if (!context) return fail(error);
  LoopbackPort port;
  if (!port.query(context, error)) return fail(error);
  ibv_pd* pd = ibv_alloc_pd(context);
  if (!pd) return fail("ibv_alloc_pd failed");

  std::vector<std::unique_ptr<Lane>> lanes;
  for (int i = 0; i < threads; ++i) {
    lanes.push_back(std::make_unique<Lane>());
    if (!open_lane(context, pd, port, static_cast<uint32_t>(bytes), *lanes.back()))
      return fail("lane " + std::to_string(i) + ": " + lanes.back()->error);
  }

  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (auto& lane : lanes)
    workers.emplace_back([&, lane = lane.get()] { stream(*lane, static_cast<uint32_t>(bytes), sends, stop); });
  std::this_thread::sleep_for(kWarmUp);
  const uint64_t first = total_completed(lanes);
  const auto begin = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const uint64_t last = total_completed(lanes);
  const double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
  stop.store(true);
  for (auto& worker : workers) worker.join();

  int status = 0;
  for (auto& lane : lanes) {
    if (!lane->error.empty()) status = fail(lane->error);
    close_lane(*lane);
  }
  ibv_dealloc_pd(pd);
  ibv_close_device(context);
  if (status != 0) return status;
  const double rate = static_cast<double>(last - first) / elapsed;
  std::printf("threads=%d seconds=%.3f messages=%llu rate=%.6g per_thread=%.6g\n", threads, elapsed,
              static_cast<unsigned long long>(last - first), rate, rate / threads);
  return 0;
}
