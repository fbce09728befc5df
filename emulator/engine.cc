#include "emulator/engine.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <cerrno>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "emulator/control/control_commands.h"
#include "emulator/control/control_server.h"
#include "emulator/device_config.h"
#include "emulator/fault/fault_injector.h"
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
constexpr int kProgressThreadNice = -10;
constexpr long kYieldToApplicationNs = 20'000;

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

// The fault plan given at start: SOFTVERBS_FAULTS (text) or
// SOFTVERBS_FAULTS_FILE (a file of the same text). false + message if bad.
bool startup_fault_plan(fault::Plan& plan, std::string& error) {
  std::string text;
  if (const char* spec = std::getenv("SOFTVERBS_FAULTS"); spec && *spec) text = spec;
  if (const char* file = std::getenv("SOFTVERBS_FAULTS_FILE"); file && *file) {
    std::ifstream in(file);
    if (!in) {
      error = std::string("SOFTVERBS_FAULTS_FILE=") + file + ": cannot read the file";
      return false;
    }
    std::stringstream content;
    content << in.rdbuf();
    text += "\n" + content.str();
  }
  if (!fault::parse_plan(text, plan, error)) {
    error = "SOFTVERBS_FAULTS: " + error;
    return false;
  }
  return true;
}

}  // namespace

Engine::Engine(Config config)
    : wire_(std::move(config.wire)),
      qpns_(std::move(config.qpns)),
      clock_(config.clock ? config.clock : &SteadyClock::instance()),
      keepalive_(std::move(config.keepalive)),
      fault_injector_(config.fault_injector) {
  if (config.progress_thread)
    progress_thread_ = std::thread([this] { progress_thread_main(); });
}

Engine::~Engine() {
  control_server_.reset();
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
  fault::Plan plan;
  std::string plan_error;
  if (!startup_fault_plan(plan, plan_error)) {
    std::fprintf(stderr, "softverbs: %s\n", plan_error.c_str());
    err = EINVAL;
    return nullptr;
  }
  auto wire = ShmWire::create(*registry, err);
  if (!wire) return nullptr;
  auto injector = std::make_unique<fault::FaultInjector>(std::move(wire), SteadyClock::instance());
  injector->set_plan(plan);
  Config config;
  config.fault_injector = injector.get();
  config.wire = std::move(injector);
  config.qpns = std::make_unique<RegistryQpnSource>(*registry);
  config.keepalive = registry;
  g_process_engine = new Engine(std::move(config));
  g_process_engine->start_control_server();
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

void Engine::start_control_server() {
  std::string error;
  control_server_ = control::ControlServer::start(
      [this](std::string_view request) {
        std::lock_guard lock(mutex_);
        return control::handle_request(*this, request);
      },
      error);
  if (!control_server_) std::fprintf(stderr, "softverbs: no control socket: %s\n", error.c_str());
}

void Engine::set_port_up(uint32_t device_index, bool up) {
  if (port_up(device_index) == up) return;
  if (up)
    ports_down_ &= ~(1u << device_index);
  else
    ports_down_ |= 1u << device_index;
  for (Hca* hca : hcas_) {
    if (hca->description().index != device_index) continue;
    Hca::Impl& impl = hca->impl();
    impl.port.state = up ? PortState::kActive : PortState::kDown;
    impl.port.phys_state = up ? 5 : 3;  // LinkUp / Disabled
    impl.raise(AsyncEvent{up ? AsyncEventType::kPortActive : AsyncEventType::kPortErr, nullptr,
                          nullptr, 1});
  }
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
  if (packet::DecodeError e = packet::decode_ib(frame, pkt); e != packet::DecodeError::kNone) {
    ++counters_.frames_dropped_malformed;
    if (e == packet::DecodeError::kBadIcrc) ++counters_.frames_dropped_bad_icrc;
    return;
  }
  const DeviceDescription* device = find_device_by_lid(pkt.headers.lrh.dlid);
  if (!device && pkt.headers.has_grh) device = find_device_by_gid(pkt.headers.grh.dgid);
  if (device && !port_up(device->index)) {
    ++counters_.frames_dropped_port_down;
    return;
  }
  auto it = device ? qps_.find(qp_key(device->index, pkt.headers.bth.dest_qp)) : qps_.end();
  if (it == qps_.end()) {
    ++counters_.frames_dropped_no_qp;
    return;
  }
  it->second->receive(pkt);
}

void Engine::watch_timer(QpImpl* qp) {
  timed_qps_.insert(qp);
  uint64_t deadline = UINT64_MAX;
  if (qp->retransmit_deadline_ns) deadline = qp->retransmit_deadline_ns;
  if (qp->rnr_deadline_ns) deadline = std::min(deadline, qp->rnr_deadline_ns);
  const uint64_t sleeping_until = progress_sleeps_until_ns_.load(std::memory_order_relaxed);
  if (sleeping_until && deadline < sleeping_until) wire_->wake();
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
  // Serving a one-sided operation whose target spins on memory needs this
  // thread on a CPU at once, ahead of the spinning application threads.
  // Best effort: without CAP_SYS_NICE the call fails and nothing changes.
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kProgressThreadNice);
  while (!stopping_.load(std::memory_order_relaxed)) {
    size_t served;
    uint64_t deadline;
    bool deferred;
    {
      std::unique_lock lock(mutex_, std::try_to_lock);
      if (!lock.owns_lock()) {
        // An application thread is inside a verb, so it serves what came
        // (a poll drains the wire): stay out of its way for a moment
        // rather than make it wait for this thread.
        timespec nap{0, kYieldToApplicationNs};
        nanosleep(&nap, nullptr);
        continue;
      }
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
    uint64_t sleep = kIdleSleepNs;
    if (deadline != UINT64_MAX) sleep = deadline > now ? std::min(sleep, deadline - now) : 0;
    if (sleep) {
      progress_sleeps_until_ns_.store(now + sleep, std::memory_order_relaxed);
      wire_->wait(sleep);
      progress_sleeps_until_ns_.store(0, std::memory_order_relaxed);
    }
  }
}

}  // namespace softverbs
