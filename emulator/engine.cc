#include "emulator/engine.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cerrno>

#include "emulator/device_config.h"
#include "emulator/qp_impl.h"
#include "emulator/wire/shm_registry.h"
#include "emulator/wire/shm_wire.h"

namespace softverbs {
namespace {

constexpr uint64_t qp_key(uint32_t device_index, uint32_t qpn) {
  return (static_cast<uint64_t>(device_index) << 32) | qpn;
}

// The longest the progress thread sleeps with nothing to do: bounds how late
// it notices a timer armed by another thread.
constexpr uint64_t kIdleSleepNs = 50'000'000;
// An application that polled this recently is taken to be polling still.
constexpr uint64_t kApplicationActiveNs = 2'000'000;
// How often the progress thread looks in while the application polls.
constexpr uint64_t kBackgroundCheckNs = 1'000'000;

class RegistryQpnSource final : public QpnSource {
 public:
  explicit RegistryQpnSource(ShmRegistry& registry) : registry_(registry) {}
  Errno allocate(uint32_t device_index, uint32_t& qpn) override {
    return registry_.allocate_qpn(device_index, qpn);
  }
  void release(uint32_t device_index, uint32_t qpn) override {
    registry_.release_qpn(device_index, qpn);
  }

 private:
  ShmRegistry& registry_;
};

// The process engine. A fork()ed child must not use its parent's (the
// parent's progress thread and mailbox are not its own): the child handler
// forgets it, deliberately leaking it, and the child builds its own.
std::mutex g_process_mutex;
Engine* g_process_engine = nullptr;

void forget_engine_in_child() {
  new (&g_process_mutex) std::mutex();
  g_process_engine = nullptr;
}

struct ProcessEngineOwner {
  ~ProcessEngineOwner() {
    std::lock_guard lock(g_process_mutex);
    delete g_process_engine;
    g_process_engine = nullptr;
  }
};
ProcessEngineOwner g_owner;

}  // namespace

Engine::Engine(Config config)
    : wire_(std::move(config.wire)),
      qpns_(std::move(config.qpns)),
      clock_(config.clock ? config.clock : &SteadyClock::instance()),
      keepalive_(std::move(config.keepalive)) {
  if (config.progress_thread)
    progress_thread_ = std::thread([this] { progress_thread_main(); });
}

Engine::~Engine() {
  stopping_.store(true);
  if (progress_thread_.joinable()) {
    wire_->wake();
    progress_thread_.join();
  }
  wire_.reset();
  qpns_.reset();
}

Engine* Engine::process(Errno& err) {
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(nullptr, nullptr, forget_engine_in_child); });
  std::lock_guard lock(g_process_mutex);
  if (g_process_engine) return g_process_engine;
  auto registry = std::shared_ptr<ShmRegistry>(ShmRegistry::attach(err).release());
  if (!registry) return nullptr;
  auto wire = ShmWire::create(*registry, err);
  if (!wire) return nullptr;
  Config config;
  config.wire = std::move(wire);
  config.qpns = std::make_unique<RegistryQpnSource>(*registry);
  config.keepalive = registry;
  g_process_engine = new Engine(std::move(config));
  err = 0;
  return g_process_engine;
}

Errno Engine::add_qp(uint32_t device_index, QpImpl* qp, uint32_t& qpn) {
  if (Errno e = qpns_->allocate(device_index, qpn)) return e;
  qps_[qp_key(device_index, qpn)] = qp;
  return 0;
}

void Engine::remove_qp(uint32_t device_index, uint32_t qpn) {
  auto it = qps_.find(qp_key(device_index, qpn));
  if (it == qps_.end()) return;
  timed_qps_.erase(it->second);
  qps_.erase(it);
  qpns_->release(device_index, qpn);
}

void Engine::transmit(uint32_t device_index, uint32_t qpn,
                      const packet::Headers& headers,
                      std::span<const uint8_t> payload) {
  size_t n = packet::encode_ib(headers, payload, frame_buffer_);
  if (n == 0) return;  // unknown opcode or oversized: a bug, nothing to send
  ++counters_.frames_sent;
  if (!wire_->send(WireAddress{device_index, qpn},
                   std::span<const uint8_t>(frame_buffer_.data(), n)))
    ++counters_.frames_dropped_unroutable;
}

void Engine::deliver(std::span<const uint8_t> frame) {
  ++counters_.frames_received;
  packet::DecodedPacket pkt;
  if (packet::decode_ib(frame, pkt) != packet::DecodeError::kNone) {
    ++counters_.frames_dropped_malformed;
    return;
  }
  const DeviceDescription* device = find_device_by_lid(pkt.headers.lrh.dlid);
  if (!device && pkt.headers.has_grh) device = find_device_by_gid(pkt.headers.grh.dgid);
  auto it = device ? qps_.find(qp_key(device->index, pkt.headers.bth.dest_qp)) : qps_.end();
  if (it == qps_.end()) {
    ++counters_.frames_dropped_no_qp;
    return;
  }
  it->second->receive(pkt);
}

void Engine::run_timers() {
  if (timed_qps_.empty()) return;
  const uint64_t now = clock_->now_ns();
  // on_timer may unwatch (or the QP may error out): iterate over a copy.
  std::vector<QpImpl*> due;
  for (QpImpl* qp : timed_qps_) {
    uint64_t d1 = qp->retransmit_deadline_ns, d2 = qp->rnr_deadline_ns;
    if ((d1 && d1 <= now) || (d2 && d2 <= now)) due.push_back(qp);
  }
  for (QpImpl* qp : due)
    if (timed_qps_.count(qp)) qp->on_timer(now);
}

uint64_t Engine::next_deadline_ns() const {
  uint64_t next = UINT64_MAX;
  for (const QpImpl* qp : timed_qps_) {
    if (qp->retransmit_deadline_ns) next = std::min(next, qp->retransmit_deadline_ns);
    if (qp->rnr_deadline_ns) next = std::min(next, qp->rnr_deadline_ns);
  }
  return next;
}

size_t Engine::progress_locked(size_t budget) {
  size_t served = wire_->poll([this](std::span<const uint8_t> f) { deliver(f); }, budget);
  run_timers();
  return served;
}

void Engine::progress_thread_main() {
  pthread_setname_np(pthread_self(), "softverbs-prog");
  while (!stopping_.load(std::memory_order_relaxed)) {
    size_t served;
    uint64_t deadline;
    bool deferred;
    {
      std::lock_guard lock(mutex_);
      served = progress_locked(256);
      deadline = next_deadline_ns();
      deferred = wire_->has_deferred();
    }
    if (served) continue;
    if (deferred) {
      // Frames wait for room at a peer: retry soon, without a busy spin.
      wire_->wait(20'000);
      continue;
    }
    uint64_t now = clock_->now_ns();
    const uint64_t last_app = last_application_progress_ns_.load(std::memory_order_relaxed);
    if (now - last_app < kApplicationActiveNs) {
      // Nap without telling senders we sleep: they need not ring for us.
      uint64_t nap = kBackgroundCheckNs;
      if (deadline != UINT64_MAX) nap = deadline > now ? std::min(nap, deadline - now) : 0;
      timespec ts{0, static_cast<long>(nap)};
      if (nap) nanosleep(&ts, nullptr);
      continue;
    }
    uint64_t sleep = kIdleSleepNs;
    if (deadline != UINT64_MAX) sleep = deadline > now ? std::min(sleep, deadline - now) : 0;
    if (sleep) wire_->wait(sleep);
  }
}

}  // namespace softverbs
