// RC between two processes on one soft device, public verbs API only:
// SEND and RDMA WRITE ping-pong latency, RDMA WRITE streaming bandwidth.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <string>

#include "bench/rc_session.h"

namespace softverbs::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Half a round trip, the figure perftest's *_lat tools report.
void report_one_way(benchmark::State& state, Clock::duration elapsed) {
  const double micros = std::chrono::duration<double, std::micro>(elapsed).count();
  state.counters["one_way_us"] = benchmark::Counter(micros / 2, benchmark::Counter::kAvgIterations);
}

// Retires send completions until at most `limit` are outstanding.
bool reap_sends(RcEndpoint& endpoint, int& outstanding, int limit, std::string& error) {
  SpinDeadline deadline;
  do {
    const int done = endpoint.poll_send_cq();
    if (done < 0) {
      error = endpoint.last_error();
      return false;
    }
    outstanding -= done;
    if (outstanding > limit && deadline.expired()) {
      error = "send completions did not arrive";
      return false;
    }
  } while (outstanding > limit);
  return true;
}

// Ends a session: the peer's outcome on success, else give up on the peer.
void close_session(benchmark::State& state, RcSession& session, bool loop_ok,
                   const std::string& loop_error) {
  if (!loop_ok) {
    session.abandon(loop_error);
    state.SkipWithError(loop_error.c_str());
    return;
  }
  std::string error;
  if (!session.finish(error)) state.SkipWithError(error.c_str());
}

// SENDs, or with `write_with_imm` RDMA WRITEs with immediate, each answered
// by one of the same that takes a receive here.
void message_pingpong(benchmark::State& state, bool write_with_imm) {
  const auto bytes = static_cast<uint32_t>(state.range(0));
  std::string error;
  auto session = RcSession::start(write_with_imm ? PeerTask::kWriteImmEcho : PeerTask::kSendEcho,
                                  bytes, state.max_iterations, error);
  if (!session) {
    state.SkipWithError(error.c_str());
    return;
  }
  RcEndpoint& endpoint = session->endpoint();
  if (!endpoint.post_recv(bytes)) {
    close_session(state, *session, false, endpoint.last_error());
    return;
  }
  bool ok = true;
  int outstanding = 0;
  const auto begin = Clock::now();
  for (auto _ : state) {
    if (!(write_with_imm ? endpoint.post_write(bytes, /*signaled=*/true, /*immediate=*/true)
                         : endpoint.post_send(bytes, /*signaled=*/true))) {
      error = endpoint.last_error();
      ok = false;
      break;
    }
    ++outstanding;
    SpinDeadline deadline;
    int received = 0;
    while ((received = endpoint.poll_recv_cq()) == 0) {
      if (deadline.expired()) break;
    }
    if (received <= 0) {
      error = received < 0 ? endpoint.last_error() : "the answering SEND did not arrive";
      ok = false;
      break;
    }
    if (!endpoint.post_recv(bytes) || !reap_sends(endpoint, outstanding, RcEndpoint::kSendQueueDepth / 2, error)) {
      if (error.empty()) error = endpoint.last_error();
      ok = false;
      break;
    }
  }
  const auto elapsed = Clock::now() - begin;
  ok = ok && reap_sends(endpoint, outstanding, 0, error);
  if (ok) report_one_way(state, elapsed);
  close_session(state, *session, ok, error);
}

void rc_send_pingpong(benchmark::State& state) { message_pingpong(state, false); }
void rc_write_imm_pingpong(benchmark::State& state) { message_pingpong(state, true); }

void rc_write_pingpong(benchmark::State& state) {
  const auto bytes = static_cast<uint32_t>(state.range(0));
  std::string error;
  auto session = RcSession::start(PeerTask::kWriteEcho, bytes, state.max_iterations, error);
  if (!session) {
    state.SkipWithError(error.c_str());
    return;
  }
  RcEndpoint& endpoint = session->endpoint();
  const uint32_t last = bytes - 1;
  std::atomic_ref<uint8_t> arrived(endpoint.recv_region()[last]);
  bool ok = true;
  int outstanding = 0;
  uint64_t k = 0;
  const auto begin = Clock::now();
  for (auto _ : state) {
    const uint8_t mark = sequence_mark(k++);
    endpoint.send_region()[last] = mark;
    if (!endpoint.post_write(bytes, /*signaled=*/true)) {
      error = endpoint.last_error();
      ok = false;
      break;
    }
    ++outstanding;
    // The answer is the peer's WRITE landing in our memory: watch its last
    // byte, and keep retiring our own completions meanwhile.
    SpinDeadline deadline;
    while (arrived.load(std::memory_order_acquire) != mark) {
      const int done = endpoint.poll_send_cq();
      if (done < 0 || deadline.expired()) {
        error = done < 0 ? endpoint.last_error() : "the answering RDMA WRITE did not land";
        ok = false;
        break;
      }
      outstanding -= done;
    }
    if (!ok) break;
    if (outstanding > RcEndpoint::kSendQueueDepth / 2 &&
        !reap_sends(endpoint, outstanding, RcEndpoint::kSendQueueDepth / 2, error)) {
      ok = false;
      break;
    }
  }
  const auto elapsed = Clock::now() - begin;
  ok = ok && reap_sends(endpoint, outstanding, 0, error);
  if (ok) report_one_way(state, elapsed);
  close_session(state, *session, ok, error);
}

void rc_write_bandwidth(benchmark::State& state) {
  const auto bytes = static_cast<uint32_t>(state.range(0));
  // WRITEs in flight at once; deep enough to keep the wire busy.
  constexpr int kWindow = 64;
  std::string error;
  auto session = RcSession::start(PeerTask::kWriteSink, bytes, state.max_iterations, error);
  if (!session) {
    state.SkipWithError(error.c_str());
    return;
  }
  RcEndpoint& endpoint = session->endpoint();
  bool ok = true;
  int outstanding = 0;
  int64_t posted = 0;
  for (auto _ : state) {
    if (outstanding >= kWindow && !reap_sends(endpoint, outstanding, kWindow - 1, error)) {
      ok = false;
      break;
    }
    if (!endpoint.post_write(bytes, /*signaled=*/true)) {
      error = endpoint.last_error();
      ok = false;
      break;
    }
    ++outstanding;
    // The last WRITE is done only when all are: wait for them inside the
    // timed loop, so the figure is bytes delivered, not bytes posted.
    if (++posted == static_cast<int64_t>(state.max_iterations) &&
        !reap_sends(endpoint, outstanding, 0, error)) {
      ok = false;
      break;
    }
  }
  ok = ok && reap_sends(endpoint, outstanding, 0, error);
  if (ok) state.SetBytesProcessed(posted * static_cast<int64_t>(bytes));
  close_session(state, *session, ok, error);
}

// 8 B to 1 MiB in steps of 8x.
void message_sizes(benchmark::internal::Benchmark* benchmark) {
  benchmark->RangeMultiplier(8)->Range(8, 1 << 20)->UseRealTime();
}

BENCHMARK(rc_send_pingpong)->Apply(message_sizes);
BENCHMARK(rc_write_pingpong)->Apply(message_sizes);
BENCHMARK(rc_write_imm_pingpong)->Apply(message_sizes);
BENCHMARK(rc_write_bandwidth)->Apply(message_sizes);

}  // namespace
}  // namespace softverbs::bench
