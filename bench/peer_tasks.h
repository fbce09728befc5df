// The peer's side of each benchmark task.
#pragma once

#include "bench/channel.h"
#include "bench/peer_protocol.h"

namespace softverbs::bench {

// Serves requests until kQuit or until the benchmark process goes away.
void serve_peer_requests(Channel& channel, SharedCacheLine& cache_line);

}  // namespace softverbs::bench
