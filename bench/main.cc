// softverbs_bench: Google Benchmark's main, plus the peer process, which must
// be forked before this process makes any verbs call.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "bench/peer_process.h"

int main(int argc, char** argv) {
  std::string error;
  if (!softverbs::bench::PeerProcess::start(error)) {
    std::fprintf(stderr, "softverbs_bench: cannot start the peer process: %s\n", error.c_str());
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
    softverbs::bench::PeerProcess::stop();
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  softverbs::bench::PeerProcess::stop();
  return 0;
}
