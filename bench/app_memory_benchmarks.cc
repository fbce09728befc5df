// What the HCA's fault-safe access to application memory costs
// (emulator/memory/app_memory.h), side by side in one run: a plain memcpy (what
// an access cost before, and what crashed on unmapped memory), the guarded
// copy (the default) and the system-call copy (SOFTVERBS_MEMORY_COPY=syscall).
// Below the verbs API on purpose: the end-to-end effect is measured with
// softverbs_bench's hot_* and rc_* benchmarks under each mode.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "emulator/memory/app_memory.h"

namespace {

using softverbs::app_memory::Mode;

void copy_plain_memcpy(benchmark::State& state) {
  std::vector<uint8_t> from(state.range(0), 1), to(state.range(0));
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), from.size());
    benchmark::DoNotOptimize(to.data());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void copy_through(benchmark::State& state, Mode mode) {
  softverbs::app_memory::set_mode(mode);
  std::vector<uint8_t> from(state.range(0), 1), to(state.range(0));
  for (auto _ : state) {
    if (!softverbs::app_memory::write(to.data(), from.data(), from.size()))
      state.SkipWithError("the copy faulted");
    benchmark::DoNotOptimize(to.data());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void copy_guarded(benchmark::State& state) { copy_through(state, Mode::kGuarded); }
void copy_syscall(benchmark::State& state) { copy_through(state, Mode::kSyscall); }

void atomic_guarded(benchmark::State& state) {
  softverbs::app_memory::set_mode(Mode::kGuarded);
  uint64_t word = 0, original = 0;
  for (auto _ : state) softverbs::app_memory::fetch_add(&word, 1, original);
  benchmark::DoNotOptimize(original);
}

#define SIZES ->Arg(64)->Arg(4096)->Arg(65536)->Arg(1 << 20)
BENCHMARK(copy_plain_memcpy) SIZES;
BENCHMARK(copy_guarded) SIZES;
BENCHMARK(copy_syscall) SIZES;
BENCHMARK(atomic_guarded);

}  // namespace

BENCHMARK_MAIN();
