// bench_thread_peers: T threads of one process, each with its own RC QP,
// CQ and completion channel, ping-pong BYTES-byte SENDs with T threads of a
// second (forked) process, as rsocket and other event-driven programs do:
// every wait for a completion blocks in ibv_get_cq_event (with `poll`, it
// busy-polls the CQ instead). Runs for SECONDS seconds after a warm-up.
// The bench runs it with T = 1 and T > 1 side by side: a provider whose
// threads don't wait on one another's wake-ups gives T times the round
// trips of one thread, as long as the cores are not all busy.
// Public verbs API only; run it under `softverbs run --`.
//
// Output on stdout, key=value pairs: threads, seconds, round_trips, rate
// (all threads, round trips per second) and per_thread (rate / threads).
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <sys/wait.h>
#include <unistd.h>

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

constexpr auto kWarmUp = std::chrono::milliseconds(300);
constexpr uint32_t kDepth = 4;
// The immediate of the initiator's last message: the peer thread answers
// it and ends.
constexpr uint32_t kLastMessage = 1;

struct Lane {
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::unique_ptr<char[]> buffer;
  std::atomic<uint64_t> round_trips{0};
  std::string error;
};

struct Options {
  int threads = 1;
  double seconds = 1;
  uint32_t bytes = 8;
  bool events = true;
};

bool open_lane(ibv_context* context, ibv_pd* pd, const Options& options, Lane& lane) {
  lane.buffer = std::make_unique<char[]>(2 * options.bytes);
  lane.mr = ibv_reg_mr(pd, lane.buffer.get(), 2 * options.bytes, IBV_ACCESS_LOCAL_WRITE);
  lane.channel = options.events ? ibv_create_comp_channel(context) : nullptr;
  lane.cq = ibv_create_cq(context, 2 * kDepth, nullptr, lane.channel, 0);
  if (!lane.mr || !lane.cq || (options.events && !lane.channel)) {
    lane.error = "cannot register memory, create a completion channel or a CQ";
    return false;
  }
  lane.qp = create_rc_qp(pd, lane.cq, lane.cq, kDepth, lane.error);
  return lane.qp != nullptr;
}

void close_lane(Lane& lane) {
  if (lane.qp) ibv_destroy_qp(lane.qp);
  if (lane.cq) ibv_destroy_cq(lane.cq);
  if (lane.channel) ibv_destroy_comp_channel(lane.channel);
  if (lane.mr) ibv_dereg_mr(lane.mr);
}

// A receive into the second half of the lane's buffer.
bool post_receive(Lane& lane, uint32_t bytes) {
  return post_one_receive(lane.qp, lane.buffer.get() + bytes, bytes, lane.mr->lkey, lane.error);
}

bool post_send(Lane& lane, uint32_t bytes, uint32_t immediate) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(lane.buffer.get()), bytes, lane.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(immediate);
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(lane.qp, &wr, &bad) == 0) return true;
  lane.error = "ibv_post_send failed";
  return false;
}

// What a lane's CQ has given since the caller last looked.
struct Taken {
  int sends = 0;
  int receives = 0;
  uint32_t immediate = 0;  // the last receive's
};

// Takes the completions the CQ holds, posting each receive again.
bool take(Lane& lane, const Options& options, Taken& taken, int& count) {
  ibv_wc wc[2];
  count = ibv_poll_cq(lane.cq, 2, wc);
  if (count < 0) {
    lane.error = "ibv_poll_cq failed";
    return false;
  }
  for (int i = 0; i < count; ++i) {
    if (wc[i].status != IBV_WC_SUCCESS) {
      lane.error = std::string("completion with status ") + ibv_wc_status_str(wc[i].status);
      return false;
    }
    if (wc[i].opcode != IBV_WC_RECV) {
      ++taken.sends;
      continue;
    }
    ++taken.receives;
    taken.immediate = ntohl(wc[i].imm_data);
    if (!post_receive(lane, options.bytes)) return false;
  }
  return true;
}

// Takes completions until `done(taken)`: busy-polling, or, with events,
// arming the CQ, looking once more (one may have come before the arming)
// and sleeping in ibv_get_cq_event.
template <class Done>
bool take_until(Lane& lane, const Options& options, Taken& taken, Done done) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  int count = 0;
  while (!done(taken)) {
    if (!take(lane, options, taken, count)) return false;
    if (count > 0 || done(taken)) continue;
    if (!options.events) {
      if (Clock::now() <= deadline) continue;
      lane.error = "no completion for 30 s";
      return false;
    }
    if (ibv_req_notify_cq(lane.cq, 0) != 0) {
      lane.error = "ibv_req_notify_cq failed";
      return false;
    }
    if (!take(lane, options, taken, count)) return false;
    if (count > 0) continue;
    ibv_cq* cq = nullptr;
    void* context = nullptr;
    if (ibv_get_cq_event(lane.channel, &cq, &context) != 0) {
      lane.error = "ibv_get_cq_event failed";
      return false;
    }
    ibv_ack_cq_events(cq, 1);
  }
  return true;
}

// The initiator: sends, waits for the answer and its own send's
// completion, until `stop`; then sends the last message.
void initiate(Lane& lane, const Options& options, const std::atomic<bool>& stop) {
  for (;;) {
    const bool last = stop.load(std::memory_order_relaxed);
    if (!post_send(lane, options.bytes, last ? kLastMessage : 0)) return;
    Taken taken;
    if (!take_until(lane, options, taken, [](const Taken& t) { return t.sends > 0 && t.receives > 0; }))
      return;
    if (last) return;
    lane.round_trips.fetch_add(1, std::memory_order_relaxed);
  }
}

// The peer: answers every message, until the last one. Its own sends'
// completions are taken along the way.
void answer(Lane& lane, const Options& options) {
  Taken taken;
  int answers = 0;
  for (;;) {
    if (!take_until(lane, options, taken, [](const Taken& t) { return t.receives > 0; })) return;
    --taken.receives;
    if (!post_send(lane, options.bytes, taken.immediate)) return;
    ++answers;
    if (taken.immediate == kLastMessage) break;
  }
  // The last answer leaves before the QP is destroyed.
  take_until(lane, options, taken, [answers](const Taken& t) { return t.sends == answers; });
}

int fail(const std::string& what) {
  std::fprintf(stderr, "bench_thread_peers: %s\n", what.c_str());
  return 1;
}

bool write_all(int fd, const void* data, size_t size) {
  return write(fd, data, size) == static_cast<ssize_t>(size);
}

bool read_all(int fd, void* data, size_t size) {
  auto* bytes = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = read(fd, bytes, size);
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// One side's lanes: opened, told to the other side through `out`, connected
// to the QPNs read from `in`.
struct Side {
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  std::vector<std::unique_ptr<Lane>> lanes;
  std::string error;

  bool open(const Options& options, int in, int out) {
    const char* device = std::getenv("SOFTVERBS_BENCH_DEVICE");
    context = open_device_named(device && *device ? device : "softverbs0", error);
    if (!context) return false;
    LoopbackPort port;
    if (!port.query(context, error)) return false;
    pd = ibv_alloc_pd(context);
    if (!pd) {
      error = "ibv_alloc_pd failed";
      return false;
    }
    std::vector<uint32_t> qpns;
    for (int i = 0; i < options.threads; ++i) {
      lanes.push_back(std::make_unique<Lane>());
      if (!open_lane(context, pd, options, *lanes.back())) {
        error = lanes.back()->error;
        return false;
      }
      qpns.push_back(lanes.back()->qp->qp_num);
    }
    std::vector<uint32_t> peer_qpns(qpns.size());
    if (!write_all(out, qpns.data(), qpns.size() * sizeof(uint32_t)) ||
        !read_all(in, peer_qpns.data(), peer_qpns.size() * sizeof(uint32_t))) {
      error = "the other process went away";
      return false;
    }
    for (size_t i = 0; i < lanes.size(); ++i) {
      Lane& lane = *lanes[i];
      if (!connect_loopback(lane.qp, port, peer_qpns[i], error)) return false;
      for (uint32_t r = 0; r < kDepth; ++r)
        if (!post_receive(lane, options.bytes)) return false;
    }
    // Both sides have posted their receives before either sends.
    char ready = 1;
    return write_all(out, &ready, 1) && read_all(in, &ready, 1);
  }

  int close() {
    int status = 0;
    for (auto& lane : lanes) {
      if (!lane->error.empty()) status = fail(lane->error);
      close_lane(*lane);
    }
    if (pd) ibv_dealloc_pd(pd);
    if (context) ibv_close_device(context);
    return status;
  }
};

int run_peer(const Options& options, int in, int out) {
  Side side;
  if (!side.open(options, in, out)) {
    fail("peer: " + side.error);
    side.close();
    return 1;
  }
  std::vector<std::thread> workers;
  for (auto& lane : side.lanes) workers.emplace_back([&, lane = lane.get()] { answer(*lane, options); });
  for (auto& worker : workers) worker.join();
  return side.close();
}

uint64_t total_round_trips(const std::vector<std::unique_ptr<Lane>>& lanes) {
  uint64_t total = 0;
  for (const auto& lane : lanes) total += lane->round_trips.load(std::memory_order_relaxed);
  return total;
}

bool parse(int argc, char** argv, Options& options) {
  if (argc < 3 || argc > 5) return false;
  options.threads = std::atoi(argv[1]);
  options.seconds = std::atof(argv[2]);
  const long bytes = argc >= 4 ? std::atol(argv[3]) : 8;
  const std::string mode = argc == 5 ? argv[4] : "events";
  if (options.threads < 1 || options.threads > 64 || options.seconds <= 0 || bytes < 1 || bytes > 4096)
    return false;
  if (mode != "events" && mode != "poll") return false;
  options.bytes = static_cast<uint32_t>(bytes);
  options.events = mode == "events";
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse(argc, argv, options)) {
    std::fprintf(stderr,
                 "usage: bench_thread_peers THREADS SECONDS [BYTES [events|poll]]   (under `softverbs run --`)\n"
                 "  THREADS 1..64, SECONDS > 0, BYTES 1..4096 (default 8), events (default) or poll\n");
    return 2;
  }
  int to_peer[2];
  int from_peer[2];
  if (pipe(to_peer) != 0 || pipe(from_peer) != 0) return fail("pipe failed");
  std::fflush(nullptr);
  const pid_t peer = fork();
  if (peer < 0) return fail("fork failed");
  if (peer == 0) {
    ::close(to_peer[1]);
    ::close(from_peer[0]);
    _exit(run_peer(options, to_peer[0], from_peer[1]));
  }
  ::close(to_peer[0]);
  ::close(from_peer[1]);

  Side side;
  if (!side.open(options, from_peer[0], to_peer[1])) {
    ::close(to_peer[1]);
    waitpid(peer, nullptr, 0);
    side.close();
    return fail(side.error);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  for (auto& lane : side.lanes)
    workers.emplace_back([&, lane = lane.get()] { initiate(*lane, options, stop); });
  std::this_thread::sleep_for(kWarmUp);
  const uint64_t first = total_round_trips(side.lanes);
  const auto begin = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(options.seconds));
  const uint64_t last = total_round_trips(side.lanes);
  const double elapsed = std::chrono::duration<double>(Clock::now() - begin).count();
  stop.store(true);
  for (auto& worker : workers) worker.join();
  int status = side.close();
  int peer_status = 0;
  if (waitpid(peer, &peer_status, 0) != peer || !WIFEXITED(peer_status) || WEXITSTATUS(peer_status) != 0)
    status = fail("the peer process failed");
  if (status != 0) return status;
  const double rate = static_cast<double>(last - first) / elapsed;
  std::printf("threads=%d seconds=%.3f round_trips=%llu rate=%.6g per_thread=%.6g\n", options.threads,
              elapsed, static_cast<unsigned long long>(last - first), rate, rate / options.threads);
  return 0;
}
