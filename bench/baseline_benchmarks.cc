// What the machine itself allows, measured in the same program as the RC
// benchmarks so the two are read side by side: a one-way hop between two
// processes through a shared cache line (the floor of any shared-memory
// wire's latency) and memcpy (the ceiling of its bandwidth).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bench/peer_process.h"

namespace softverbs::bench {
namespace {

void baseline_cache_line_hop(benchmark::State& state) {
  PeerProcess* peer = PeerProcess::get();
  if (!peer) {
    state.SkipWithError(PeerProcess::gone_reason().c_str());
    return;
  }
  SharedCacheLine& line = peer->cache_line();
  line.value.store(0, std::memory_order_relaxed);
  const auto reply_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(kHangLimit);
  PeerReply ready;
  if (!peer->channel().send(PeerRequest{PeerTask::kCacheLineHop, 0, static_cast<uint64_t>(state.max_iterations)}) ||
      !peer->channel().receive(ready, reply_timeout)) {
    PeerProcess::abandon("no answer to the cache line hop");
    state.SkipWithError("the peer process did not answer");
    return;
  }
  bool ok = true;
  uint64_t i = 0;
  const auto begin = std::chrono::steady_clock::now();
  for (auto _ : state) {
    line.value.store(2 * i + 1, std::memory_order_release);
    SpinDeadline deadline;
    while (line.value.load(std::memory_order_acquire) != 2 * i + 2) {
      if (deadline.expired()) {
        ok = false;
        break;
      }
    }
    if (!ok) break;
    ++i;
  }
  const auto elapsed = std::chrono::steady_clock::now() - begin;
  if (!ok) {
    PeerProcess::abandon("the cache line hop stalled");
    state.SkipWithError("the peer did not answer on the cache line");
    return;
  }
  PeerReply outcome;
  if (!peer->channel().receive(outcome, reply_timeout) || !outcome.ok) {
    state.SkipWithError(outcome.ok ? "the peer did not report" : outcome.message);
    return;
  }
  const double nanos = std::chrono::duration<double, std::nano>(elapsed).count();
  state.counters["one_way_ns"] = benchmark::Counter(nanos / 2, benchmark::Counter::kAvgIterations);
}

void baseline_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> source(bytes, 'x');
  std::vector<char> target(bytes, 0);
  for (auto _ : state) {
    std::memcpy(target.data(), source.data(), bytes);
    benchmark::DoNotOptimize(target.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

BENCHMARK(baseline_cache_line_hop)->UseRealTime();
BENCHMARK(baseline_memcpy)->Arg(64 << 10)->Arg(1 << 20);

}  // namespace
}  // namespace softverbs::bench
