// bench_qps: creates QPS RC QPs in one process, connects them to each other
// in loopback pairs, reports how long that took and what it cost in memory,
// then holds them idle for HOLD_SECONDS so the bench can read the process's
// CPU time from /proc while nothing happens. Public verbs API only; run it
// under `softverbs run --`.
//
// Output on stdout, key=value pairs: first `pid=... qps=... created=...
// create_seconds=... connect_seconds=... seconds=... rss_kib=...
// rss_start_kib=...`, then a line `holding`, then after the hold
// `destroy_seconds=...`. When the device runs out of QPs before QPS, created
// says how many fit and the reason goes to stderr; that is not an error.
#include <infiniband/verbs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench/loopback.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point begin) {
  return std::chrono::duration<double>(Clock::now() - begin).count();
}

int fail(const std::string& what) {
  std::fprintf(stderr, "bench_qps: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace softverbs::bench;
  if (argc != 3) {
    std::fprintf(stderr, "usage: bench_qps QPS HOLD_SECONDS   (under `softverbs run --`)\n");
    return 2;
  }
  const long requested = std::atol(argv[1]);
  const double hold = std::atof(argv[2]);
  if (requested < 2 || requested % 2 != 0 || hold < 0) return fail("QPS must be an even number >= 2, HOLD_SECONDS >= 0");

  const long rss_start = resident_kib();
  const char* device = std::getenv("SOFTVERBS_BENCH_DEVICE");
  std::string error;
  ibv_context* context = open_device_named(device && *device ? device : "softverbs0", error);
  if (!context) return fail(error);
  LoopbackPort port;
  if (!port.query(context, error)) return fail(error);
  ibv_pd* pd = ibv_alloc_pd(context);
  ibv_cq* cq = ibv_create_cq(context, 64, nullptr, nullptr, 0);
  if (!pd || !cq) return fail("cannot allocate a PD and a CQ");

  // Depth 1: the figure is the cost of a QP, not of its queues.
  const auto begin = Clock::now();
  std::vector<ibv_qp*> qps;
  qps.reserve(static_cast<std::size_t>(requested));
  while (static_cast<long>(qps.size()) < requested) {
    ibv_qp* first = create_rc_qp(pd, cq, cq, 1, error);
    ibv_qp* second = first ? create_rc_qp(pd, cq, cq, 1, error) : nullptr;
    if (!second) {
      if (first) ibv_destroy_qp(first);
      std::fprintf(stderr, "bench_qps: stopped after %zu QPs: %s\n", qps.size(), error.c_str());
      break;
    }
    qps.push_back(first);
    qps.push_back(second);
  }
  const double create_seconds = seconds_since(begin);
  const auto connect_begin = Clock::now();
  for (std::size_t i = 0; i + 1 < qps.size(); i += 2) {
    if (!connect_loopback(qps[i], port, qps[i + 1]->qp_num, error) ||
        !connect_loopback(qps[i + 1], port, qps[i]->qp_num, error))
      return fail("QP pair " + std::to_string(i / 2) + ": " + error);
  }
  const double connect_seconds = seconds_since(connect_begin);
  std::printf("pid=%d qps=%ld created=%zu create_seconds=%.6f connect_seconds=%.6f seconds=%.6f rss_kib=%ld rss_start_kib=%ld\n",
              static_cast<int>(getpid()), requested, qps.size(), create_seconds, connect_seconds,
              seconds_since(begin), resident_kib(), rss_start);
  std::printf("holding\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::duration<double>(hold));

  const auto destroy_begin = Clock::now();
  for (ibv_qp* qp : qps) ibv_destroy_qp(qp);
  const double destroy_seconds = seconds_since(destroy_begin);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(context);
  std::printf("destroy_seconds=%.6f\n", destroy_seconds);
  return qps.empty() ? 1 : 0;
}
