#include "bench/peer_tasks.h"

#include <atomic>
#include <memory>
#include <string>

#include "bench/rc_endpoint.h"

namespace softverbs::bench {
namespace {

// The benchmark process may take this long between two requests (it runs
// baselines and reports meanwhile); the peer gives up after it.
constexpr std::chrono::minutes kIdleLimit{30};

// Retires send completions until none is outstanding.
bool drain_sends(RcEndpoint& endpoint, int& outstanding, std::string& error) {
  SpinDeadline deadline;
  while (outstanding > 0) {
    const int done = endpoint.poll_send_cq();
    if (done < 0) {
      error = endpoint.last_error();
      return false;
    }
    outstanding -= done;
    if (deadline.expired()) {
      error = "peer: send completions did not arrive";
      return false;
    }
  }
  return true;
}

// SEND echo, or with `write_with_imm` the same with RDMA WRITEs with
// immediate, which take the receives as SENDs do.
bool send_echo(RcEndpoint& endpoint, const PeerRequest& request, bool write_with_imm,
               std::string& error) {
  int outstanding = 0;
  for (uint64_t i = 0; i < request.iterations; ++i) {
    SpinDeadline deadline;
    int received = 0;
    while ((received = endpoint.poll_recv_cq()) == 0) {
      const int done = endpoint.poll_send_cq();
      if (done > 0) outstanding -= done;
      if (deadline.expired()) {
        error = "peer: the SEND to answer did not arrive";
        return false;
      }
    }
    if (received < 0) {
      error = endpoint.last_error();
      return false;
    }
    // Re-arm before answering: the next SEND comes only after the answer.
    const bool answered =
        write_with_imm ? endpoint.post_write(request.message_bytes, true, /*immediate=*/true)
                       : endpoint.post_send(request.message_bytes, /*signaled=*/true);
    if (!endpoint.post_recv(request.message_bytes) || !answered) {
      error = endpoint.last_error();
      return false;
    }
    ++outstanding;
    if (outstanding >= RcEndpoint::kSendQueueDepth / 2 && !drain_sends(endpoint, outstanding, error))
      return false;
  }
  return drain_sends(endpoint, outstanding, error);
}

bool write_echo(RcEndpoint& endpoint, const PeerRequest& request, std::string& error) {
  const uint32_t last = request.message_bytes - 1;
  std::atomic_ref<uint8_t> arrived(endpoint.recv_region()[last]);
  int outstanding = 0;
  for (uint64_t i = 0; i < request.iterations; ++i) {
    const uint8_t mark = sequence_mark(i);
    SpinDeadline deadline;
    while (arrived.load(std::memory_order_acquire) != mark) {
      const int done = endpoint.poll_send_cq();
      if (done < 0) {
        error = endpoint.last_error();
        return false;
      }
      outstanding -= done;
      if (deadline.expired()) {
        error = "peer: the RDMA WRITE to answer did not land";
        return false;
      }
    }
    endpoint.send_region()[last] = mark;
    if (!endpoint.post_write(request.message_bytes, /*signaled=*/true)) {
      error = endpoint.last_error();
      return false;
    }
    ++outstanding;
    if (outstanding >= RcEndpoint::kSendQueueDepth / 2 && !drain_sends(endpoint, outstanding, error))
      return false;
  }
  return drain_sends(endpoint, outstanding, error);
}

// Like perftest's server side, the written-to process makes no verbs calls
// while it is written to: the payload must land without its help.
bool write_sink(Channel& channel, std::string& error) {
  PeerRequest finish;
  if (!channel.receive(finish, std::chrono::duration_cast<std::chrono::milliseconds>(kIdleLimit)) ||
      finish.task != PeerTask::kFinish) {
    error = "peer: no end of the RDMA WRITE stream";
    return false;
  }
  return true;
}

bool cache_line_hop(SharedCacheLine& line, const PeerRequest& request, std::string& error) {
  for (uint64_t i = 0; i < request.iterations; ++i) {
    SpinDeadline deadline;
    while (line.value.load(std::memory_order_acquire) != 2 * i + 1) {
      if (deadline.expired()) {
        error = "peer: the cache line was not written";
        return false;
      }
    }
    line.value.store(2 * i + 2, std::memory_order_release);
  }
  return true;
}

// The RC tasks: endpoint set-up, the handshake of peer_protocol.h, the loop.
// Returns false when the conversation is broken beyond a reply.
bool serve_rc_task(Channel& channel, const PeerRequest& request) {
  std::string error;
  auto endpoint = RcEndpoint::open(benchmark_device_name(), request.message_bytes, error);
  PeerReply opened = endpoint ? PeerReply::success() : PeerReply::failure(error);
  if (endpoint) opened.address = endpoint->address();
  if (!channel.send(opened)) return false;
  if (!endpoint) return true;  // the failure was told; serve the next request

  EndpointAddress remote;
  if (!channel.receive(remote, std::chrono::duration_cast<std::chrono::milliseconds>(kHangLimit)))
    return false;
  bool ok = endpoint->connect(remote, error);
  if (ok && (request.task == PeerTask::kSendEcho || request.task == PeerTask::kWriteImmEcho)) {
    ok = endpoint->post_recv(request.message_bytes);
    if (!ok) error = endpoint->last_error();
  }
  if (!channel.send(ok ? PeerReply::success() : PeerReply::failure(error))) return false;
  if (!ok) return true;

  switch (request.task) {
    case PeerTask::kSendEcho:
    case PeerTask::kWriteImmEcho:
      ok = send_echo(*endpoint, request, request.task == PeerTask::kWriteImmEcho, error);
      break;
    case PeerTask::kWriteEcho:
      ok = write_echo(*endpoint, request, error);
      break;
    default:
      ok = write_sink(channel, error);
      break;
  }
  endpoint.reset();
  return channel.send(ok ? PeerReply::success() : PeerReply::failure(error));
}

bool serve_cache_line_hop(Channel& channel, SharedCacheLine& line, const PeerRequest& request) {
  if (!channel.send(PeerReply::success())) return false;
  std::string error;
  const bool ok = cache_line_hop(line, request, error);
  return channel.send(ok ? PeerReply::success() : PeerReply::failure(error));
}

}  // namespace

void serve_peer_requests(Channel& channel, SharedCacheLine& cache_line) {
  for (;;) {
    PeerRequest request;
    if (!channel.receive(request, std::chrono::duration_cast<std::chrono::milliseconds>(kIdleLimit)))
      return;
    bool conversation_ok = true;
    switch (request.task) {
      case PeerTask::kSendEcho:
      case PeerTask::kWriteImmEcho:
      case PeerTask::kWriteEcho:
      case PeerTask::kWriteSink:
        if (request.message_bytes == 0) {
          conversation_ok = channel.send(PeerReply::failure("peer: empty messages are not benchmarked"));
          break;
        }
        conversation_ok = serve_rc_task(channel, request);
        break;
      case PeerTask::kCacheLineHop:
        conversation_ok = serve_cache_line_hop(channel, cache_line, request);
        break;
      case PeerTask::kFinish:
      case PeerTask::kQuit:
        return;
    }
    if (!conversation_ok) return;
  }
}

}  // namespace softverbs::bench
