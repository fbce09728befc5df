// What ibv_reg_mr and ibv_dereg_mr cost, per size, on page-aligned
// anonymous memory the program has touched (as perftest's buffers): with
// shared MR pages (the default) the pages move onto a file and back, one
// copy each way; with SOFTVERBS_SHARE_MR_PAGES=0 nothing moves. Run the
// two side by side:
//   softverbs run -- softverbs_bench --benchmark_filter=reg_mr
//   SOFTVERBS_SHARE_MR_PAGES=0 softverbs run -- softverbs_bench --benchmark_filter=reg_mr
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <string>

#include "bench/loopback.h"
#include "bench/rc_endpoint.h"

namespace softverbs::bench {
namespace {

constexpr int kRemoteAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

// One registration and its deregistration; the time of each apart too.
void reg_mr(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::string error;
  ibv_context* context = open_device_named(benchmark_device_name(), error);
  ibv_pd* pd = context ? ibv_alloc_pd(context) : nullptr;
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (!pd || memory == MAP_FAILED) {
    state.SkipWithError(context ? "cannot allocate a PD or the memory" : error.c_str());
  } else {
    std::memset(memory, 1, bytes);  // present, as a program's buffer is
    using Clock = std::chrono::steady_clock;
    std::chrono::duration<double> register_seconds{0}, deregister_seconds{0};
    for (auto _ : state) {
      const auto start = Clock::now();
      ibv_mr* mr = ibv_reg_mr(pd, memory, bytes, kRemoteAccess);
      const auto registered = Clock::now();
      if (!mr) {
        state.SkipWithError("ibv_reg_mr failed");
        break;
      }
      ibv_dereg_mr(mr);
      register_seconds += registered - start;
      deregister_seconds += Clock::now() - registered;
    }
    const auto n = static_cast<double>(state.iterations());
    state.counters["reg_us"] = n ? register_seconds.count() / n * 1e6 : 0;
    state.counters["dereg_us"] = n ? deregister_seconds.count() / n * 1e6 : 0;
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  }
  if (memory != MAP_FAILED) munmap(memory, bytes);
  if (pd) ibv_dealloc_pd(pd);
  if (context) ibv_close_device(context);
}

BENCHMARK(reg_mr)
    ->Arg(4 << 10)
    ->Arg(64 << 10)
    ->Arg(1 << 20)
    ->Arg(16 << 20)
    ->Arg(256 << 20)
    ->Arg(1 << 30)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace softverbs::bench
