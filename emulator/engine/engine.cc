// The engine's construction, its QP table, transmission and the process
// engine. Intake and progress are in packet_intake.cc and
// progress_thread.cc.
#include "emulator/engine/engine.h"

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "emulator/capture/packet_capture.h"
#include "emulator/control/control_commands.h"
#include "emulator/control/control_server.h"
#include "emulator/engine/fault_conversations.h"
#include "emulator/fault/fault_injector.h"
#include "emulator/host/device_config.h"
#include "emulator/host/gsi_routing.h"
#include "emulator/objects/hca_impl.h"
#include "emulator/objects/qp_impl.h"
#include "emulator/same_host/fair_timeout.h"
#include "emulator/same_host/local_delivery.h"
#include "emulator/same_host/run_frame.h"
#include "emulator/same_host/target_table.h"
#include "emulator/sync/internal_thread.h"
#include "emulator/trace/trace_directory.h"
#include "emulator/wire/futex.h"
#include "emulator/wire/routed_wire.h"
#include "emulator/wire/shm_names.h"
#include "emulator/wire/shm_registry.h"
#include "emulator/wire/shm_wire.h"
#include "emulator/wire/udp_wire.h"

namespace softverbs {
namespace {

constexpr uint64_t qp_key(uint32_t device_index, uint32_t qpn) {
  return (static_cast<uint64_t>(device_index) << 32) | qpn;
}

class RegistryQpnSource final : public QpnSource {
 public:
  explicit RegistryQpnSource(ShmRegistry& registry) : registry_(registry) {}
  Errno allocate(uint32_t device_index, uint32_t& qpn) override {
    return registry_.allocate_qpn(device_index, qpn);
  }
  void release(uint32_t device_index, uint32_t qpn) override {
    registry_.release_qpn(device_index, qpn);
  }
  bool holder_alive(uint32_t device_index, uint32_t qpn) override {
    ProcessRef owner;
    return registry_.lookup_qpn(device_index, qpn, owner);
  }

 private:
  ShmRegistry& registry_;
};

class RegistryCmPortDirectory final : public CmPortDirectory {
 public:
  explicit RegistryCmPortDirectory(ShmRegistry& registry) : registry_(registry) {}
  // The registry's handles start at 0; the directory's never do (0: none).
  Errno bind(uint16_t port_space, const Gid& address, uint16_t& port, uint32_t agent_qpn,
             uint32_t& handle) override {
    uint32_t index = 0;
    if (Errno err = registry_.bind_cm_port(port_space, address, port, agent_qpn, index))
      return err;
    handle = index + 1;
    return 0;
  }
  Errno listen(uint32_t handle) override {
    return handle ? registry_.listen_cm_port(handle - 1) : EINVAL;
  }
  void release(uint32_t handle) override {
    if (handle) registry_.release_cm_port(handle - 1);
  }
  bool find_listener(uint16_t port_space, uint16_t port, const Gid& address,
                     CmPortBinding& out) override {
    ShmRegistry::CmBinding found;
    if (!registry_.find_cm_listener(port_space, port, address, found)) return false;
    out = CmPortBinding{found.port_space, found.port, found.address, found.agent_qpn,
                        found.listening};
    return true;
  }
  bool any_listening_agent(uint32_t& agent_qpn) override {
    const std::vector<ShmRegistry::CmBinding> listeners = registry_.cm_listeners();
    if (listeners.empty()) return false;
    agent_qpn = listeners.front().agent_qpn;
    return true;
  }

 private:
  ShmRegistry& registry_;
};

class RegistryMulticastDirectory final : public MulticastDirectory {
 public:
  explicit RegistryMulticastDirectory(ShmRegistry& registry) : registry_(registry) {}
  Errno attach(uint32_t device_index, const Gid& gid, uint16_t lid, uint32_t qpn) override {
    return registry_.attach_multicast(device_index, gid, lid, qpn);
  }
  Errno detach(uint32_t device_index, const Gid& gid, uint16_t lid, uint32_t qpn) override {
    return registry_.detach_multicast(device_index, gid, lid, qpn);
  }
  Errno routes(const Gid* gid, uint16_t lid, std::vector<MulticastRoute>& out) override {
    std::lock_guard lock(mutex_);
    if (Errno err = registry_.multicast_members(gid, lid, members_)) return err;
    out.clear();
    for (const ShmRegistry::MulticastMember& m : members_) {
      // One copy per process: its intake serves all its members.
      bool seen = false;
      for (uint32_t slot : slots_seen_) seen = seen || slot == m.slot;
      if (seen) continue;
      slots_seen_.push_back(m.slot);
      out.push_back(MulticastRoute{m.device_index, m.qpn});
    }
    slots_seen_.clear();
    return 0;
  }

 private:
  ShmRegistry& registry_;
  std::mutex mutex_;
  // Scratch, reused: routes() is called with the sending QP's lock held,
  // from any thread, so it is guarded by its own mutex.
  std::vector<ShmRegistry::MulticastMember> members_;
  std::vector<uint32_t> slots_seen_;
};

// The process engine. A fork()ed child must not use its parent's (the
// parent's progress thread and mailbox are not its own): the child handler
// forgets it, deliberately leaking it, and the child builds its own.
std::mutex g_process_mutex;
Engine* g_process_engine = nullptr;

// The engine the fork handlers hold, once it is running. Read without
// g_process_mutex: the prepare handlers of other libraries (the registry's)
// run first and take their locks, which Engine::process takes under
// g_process_mutex; taking it here would close a cycle.
std::atomic<Engine*> g_engine_to_hold{nullptr};

void hold_engine_for_fork() {
  if (Engine* engine = g_engine_to_hold.load(std::memory_order_acquire))
    engine->hold_progress_for_fork();
}

void release_engine_in_parent() {
  if (Engine* engine = g_engine_to_hold.load(std::memory_order_acquire))
    engine->release_progress_after_fork();
}

void forget_engine_in_child() {
  new (&g_process_mutex) std::mutex();
  g_process_engine = nullptr;
  g_engine_to_hold.store(nullptr, std::memory_order_relaxed);
}

// At exit the process engine is left, not destroyed: the program's other
// threads may still be inside it (Engine::leave_at_exit).
struct ProcessEngineOwner {
  ~ProcessEngineOwner() {
    std::lock_guard lock(g_process_mutex);
    g_engine_to_hold.store(nullptr, std::memory_order_release);
    if (g_process_engine) g_process_engine->leave_at_exit();
  }
};
ProcessEngineOwner g_owner;

// The frame being built by this thread: transmission is per QP, so each
// sending thread has its own.
std::span<uint8_t> frame_buffer() {
  thread_local std::array<uint8_t, packet::kMaxFrameBytes> buffer;
  return buffer;
}

}  // namespace

Engine::Engine(Config config)
    : wire_(std::move(config.wire)),
      doorbell_(*config.doorbell),
      qpns_(std::move(config.qpns)),
      clock_(config.clock ? config.clock : &SteadyClock::instance()),
      keepalive_(std::move(config.keepalive)),
      capture_(std::move(config.capture)),
      trace_(std::move(config.trace)),
      fault_injector_(config.fault_injector),
      same_host_(config.same_host_peers, config.fault_injector,
                 SameHost::Settings{config.local_delivery, config.fair_timers}) {
  multicast_ = config.multicast ? std::move(config.multicast)
                                : std::make_unique<LocalMulticastDirectory>();
  cm_ports_ = config.cm_ports ? std::move(config.cm_ports)
                              : std::make_unique<LocalCmPortDirectory>();
  if (fault_injector_) {
    fault_conversations_ = std::make_unique<FaultConversations>(*this);
    fault_injector_->set_conversations(fault_conversations_.get());
    // A frame held back (delay, reorder) is released by the intake's next
    // poll at its time: a timer ends the intake's sleep then.
    fault_injector_->set_release_alarm(
        [this](uint64_t release_ns) { schedule_timer(kWireReleaseTimer, release_ns); });
  }
  if (config.progress_thread) {
    progress_thread_ = start_internal_thread([this] { progress_thread_main(); });
    // Peers find this process alive by the liveness page the thread holds:
    // a peer's first operation must not find it not yet held (on a busy
    // host the thread may wait for a CPU for milliseconds) and go the slow
    // way for that MR from then on.
    // A futex, not atomic::wait: that yields in a loop first, and a
    // yielding thread waits long beside the raised-priority thread.
    while (progress_thread_alive_.load(std::memory_order_acquire) == 0)
      futex_wait_shared(progress_thread_alive_, 0, 0);
  }
}

void Engine::stop_own_threads() {
  // Initiators stop executing here (a process that is killed cannot say
  // so: theirs then fail at the kernel and go as packets).
  same_host_.stop_accepting();
  // Users with threads of their own on this engine stop them first.
  for (auto it = teardown_hooks_.rbegin(); it != teardown_hooks_.rend(); ++it) (*it)();
  teardown_hooks_.clear();
  control_server_.reset();
  stopping_.store(true);
  standing_poll_.withdraw();
  if (progress_thread_.joinable()) {
    doorbell_.wake();
    progress_thread_.join();
  }
}

Engine::~Engine() {
  stop_own_threads();
  // Its thread waits on a word of the target area, which the wire holds.
  same_host_.stop_deferred_sharing();
  if (fault_injector_) fault_injector_->set_conversations(nullptr);
  wire_.reset();
  qpns_.reset();
}

void Engine::leave_at_exit() {
  stop_own_threads();
  for (const std::function<void()>& hook : exit_hooks_) hook();
  exit_hooks_.clear();
}

namespace {

// Why no device opens, when the registry is the reason and the user can act.
void report_registry_failure(Errno err) {
  const std::string path = shm_file_path(ShmRegistry::segment_name());
  if (err == ETIMEDOUT)
    std::fprintf(stderr,
                 "softverbs: the shared registry %s stayed locked: a softverbs process "
                 "holding it is stopped (SIGSTOP, a debugger); resume or kill it\n",
                 path.c_str());
  else if (err == EPROTO)
    std::fprintf(stderr,
                 "softverbs: %s was made by another softverbs version or is damaged; stop "
                 "this user's softverbs programs and run 'softverbs reset'\n",
                 path.c_str());
  else if (err == EACCES)
    std::fprintf(stderr,
                 "softverbs: %s is not private to this user (owner and mode 0600 "
                 "expected); if it is yours, 'softverbs reset' removes it\n",
                 path.c_str());
  else if (err == EAGAIN)
    std::fprintf(stderr,
                 "softverbs: could not join the shared registry %s: all %u process slots "
                 "are taken by this user's programs, or its creator never finished it\n",
                 path.c_str(), ShmRegistry::kMaxProcesses);
}

// RoCE devices reach other hosts over UDP (SOFTVERBS_UDP=0: never). When the
// port cannot be had, they still reach this host's processes.
std::unique_ptr<Wire> with_udp_wire(std::unique_ptr<Wire> local, Doorbell& local_doorbell,
                                    std::shared_ptr<ShmRegistry> registry) {
  const char* enabled = std::getenv("SOFTVERBS_UDP");
  if (enabled && std::string_view(enabled) == "0") return local;
  bool any_roce = false;
  for (const DeviceDescription& d : configured_devices())
    any_roce = any_roce || d.link_layer == LinkLayer::kEthernet;
  if (!any_roce) return local;
  const uint16_t port = UdpWire::configured_port();
  Errno err = 0;
  std::unique_ptr<UdpWire> udp = UdpWire::open(port, err);
  if (!udp) {
    std::fprintf(stderr,
                 "softverbs: RoCE devices cannot reach other hosts: UDP port %u: %s%s\n",
                 unsigned{port}, std::strerror(err),
                 err == EADDRINUSE
                     ? " (another user's program or the kernel's rxe has it; set "
                       "SOFTVERBS_UDP_PORT on every host to use another port)"
                     : "");
    return local;
  }
  auto owner = [](const Gid& address, uint32_t& device_index) {
    const DeviceDescription* d = find_device_by_gid(address);
    if (!d) return false;
    device_index = d->index;
    return true;
  };
  // QP1 traffic goes where the connection manager's rule says, among this
  // user's processes on the host.
  auto ports = std::make_shared<RegistryCmPortDirectory>(*registry);
  auto gsi = [ports, registry](std::span<const uint8_t> frame, uint32_t& qpn) {
    const GsiRouter router = installed_gsi_router();
    packet::DecodedPacket p;
    if (!router || packet::decode_ib(frame, p) != packet::DecodeError::kNone) return false;
    return router(p.payload, p.headers.grh.dgid, *ports, qpn);
  };
  auto interface_of = [](const Gid& address) -> uint32_t {
    const DeviceDescription* d = find_device_by_gid(address);
    if (!d) return 0;
    for (const GidEntry& entry : d->gids)
      if (entry.gid == address) return entry.ifindex;
    return 0;
  };
  return std::make_unique<RoutedWire>(std::move(local), local_doorbell, std::move(udp),
                                      RoutedWire::Routing{owner, gsi, interface_of});
}

// What a process's environment asks of its engine.
struct ProcessSettings {
  fault::Plan plan;
  bool fair_timers = true;
  std::shared_ptr<capture::PacketCapture> capture;
  std::shared_ptr<trace::TraceDirectory> traces;
};

// false, with EINVAL and a message on stderr saying what is wrong, for a
// setting that makes no sense.
bool read_process_settings(ProcessSettings& settings, Errno& err) {
  std::string error;
  if (fault::startup_plan(settings.plan, error) &&
      parse_timer_mode(std::getenv("SOFTVERBS_TIMERS"), settings.fair_timers, error)) {
    settings.capture = capture::PacketCapture::from_environment(error);
    if (error.empty()) settings.traces = trace::TraceDirectory::from_environment(error);
  }
  if (error.empty()) return true;
  std::fprintf(stderr, "softverbs: %s\n", error.c_str());
  err = EINVAL;
  return false;
}

// The process's wire: shared memory, with the UDP wire beside it when RoCE
// devices reach other hosts, inside the fault injector (which also shows
// the capture every frame). The shared-memory wire's other faces go to the
// engine beside it.
struct ProcessWire {
  std::unique_ptr<fault::FaultInjector> injector;
  SameHostPeers* same_host_peers = nullptr;
  Doorbell* doorbell = nullptr;
  RoutedWire* routed = nullptr;  // null: this host only
};

bool make_process_wire(const std::shared_ptr<ShmRegistry>& registry,
                       const ProcessSettings& settings, ProcessWire& out, Errno& err) {
  std::unique_ptr<ShmWire> shm_wire = ShmWire::create(*registry, err);
  if (!shm_wire) return false;
  out.same_host_peers = shm_wire.get();
  out.doorbell = shm_wire.get();
  std::unique_ptr<Wire> wire = with_udp_wire(std::move(shm_wire), *out.doorbell, registry);
  out.routed = dynamic_cast<RoutedWire*>(wire.get());
  out.injector = std::make_unique<fault::FaultInjector>(std::move(wire), SteadyClock::instance());
  out.injector->set_plan(settings.plan);
  out.injector->set_salt(fault::process_salt());
  if (settings.capture) out.injector->set_observer(settings.capture.get());
  return true;
}

// What the process's engine keeps until the process exits.
void hold_until_exit(Engine& engine, const std::shared_ptr<ShmRegistry>& registry,
                     const ProcessSettings& settings) {
  // What the kernel's release of a dead process's locks does not do: free
  // the slot's names now, and let the last process remove the segments.
  engine.add_exit_hook([registry] { registry->leave(); });
  if (settings.capture) engine.add_exit_hook([capture = settings.capture] { capture->stop(); });
  if (settings.traces) engine.add_exit_hook([traces = settings.traces] { traces->finish_all(); });
}

}  // namespace

Engine* Engine::process(Errno& err) {
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] {
    pthread_atfork(hold_engine_for_fork, release_engine_in_parent, forget_engine_in_child);
  });
  std::lock_guard lock(g_process_mutex);
  if (g_process_engine) return g_process_engine;
  auto registry = std::shared_ptr<ShmRegistry>(ShmRegistry::attach(err).release());
  if (!registry) {
    report_registry_failure(err);
    return nullptr;
  }
  ProcessSettings settings;
  ProcessWire wire;
  if (!read_process_settings(settings, err) || !make_process_wire(registry, settings, wire, err))
    return nullptr;
  Config config;
  config.fault_injector = wire.injector.get();
  config.wire = std::move(wire.injector);
  config.same_host_peers = wire.same_host_peers;
  config.doorbell = wire.doorbell;
  config.qpns = std::make_unique<RegistryQpnSource>(*registry);
  config.multicast = std::make_unique<RegistryMulticastDirectory>(*registry);
  config.cm_ports = std::make_unique<RegistryCmPortDirectory>(*registry);
  config.keepalive = registry;
  config.capture = settings.capture;
  config.local_delivery = true;
  config.fair_timers = settings.fair_timers;
  config.trace = settings.traces;
  g_process_engine = new Engine(std::move(config));
  hold_until_exit(*g_process_engine, registry, settings);
  if (wire.routed) g_process_engine->serve_other_hosts(*wire.routed);
  g_process_engine->start_control_server();
  g_engine_to_hold.store(g_process_engine, std::memory_order_release);
  err = 0;
  return g_process_engine;
}

void Engine::serve_other_hosts(RoutedWire& routed) {
  reaches_other_hosts_ = true;
  routed.set_intake([this] { progress(); });
  add_teardown_hook([&routed] {
    routed.set_intake({});
    routed.stop_receiving();
  });
}

bool Engine::acknowledges_each_packet() const {
  return fault_injector_ && fault_injector_->has_rules();
}

void Engine::set_forced_rnr_qpn(uint32_t qpn) {
  same_host_.target_table().set_taking_sends(qpn == 0);
  forced_rnr_qpn_.store(qpn, std::memory_order_relaxed);
}

bool Engine::fault_plan_answers_rnr(const QpImpl& qp, const packet::Headers& headers) {
  return fault_conversations_ && fault_conversations_->answers_with_rnr(qp, headers);
}

// ---- QP table

Errno Engine::add_qp(uint32_t device_index, QpImpl* qp, uint32_t& qpn) {
  if (Errno e = qpns_->allocate(device_index, qpn)) return e;
  // Set before intake can see the QP; read-only from then on.
  qp->qpn = qpn;
  qp->ordinal = qp_ordinals_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (trace_) qp->trace = trace_->open(qp->ordinal);
  std::lock_guard lock(intake_mutex_);
  std::lock_guard table(qp_table_mutex_);
  qps_[qp_key(device_index, qpn)] = qp;
  same_host_.mark_local_qpn(device_index, qpn, true);
  return 0;
}

void Engine::remove_qp(uint32_t device_index, uint32_t qpn) {
  {
    // Taken blocking: once it is ours, no intake holds the QP any more.
    std::lock_guard lock(intake_mutex_);
    std::lock_guard table(qp_table_mutex_);
    if (qps_.erase(qp_key(device_index, qpn)) == 0) return;
    same_host_.mark_local_qpn(device_index, qpn, false);
  }
  qpns_->release(device_index, qpn);
}

QpImpl* Engine::find_qp(uint32_t device_index, uint32_t qpn) const {
  auto it = qps_.find(qp_key(device_index, qpn));
  return it == qps_.end() ? nullptr : it->second;
}

// ---- transmission

void Engine::send_frame(const WireAddress& dst, std::span<const uint8_t> frame, bool local) {
  counters_.frames_sent.add();
  if (local) return LocalDelivery::keep(*this, frame);
  if (!wire_->send(dst, frame))
    counters_.frames_dropped_unroutable.fetch_add(1, std::memory_order_relaxed);
}

// A frame delivered locally never leaves this process's private memory: it
// goes without an ICRC, which would cost a CRC pass on each side.
static packet::Icrc icrc_for(bool local) {
  return local ? packet::Icrc::kOmitted : packet::Icrc::kComputed;
}

void Engine::transmit(const WireAddress& dst, const packet::Headers& headers,
                      std::span<const uint8_t> payload) {
  std::span<uint8_t> buffer = frame_buffer();
  const bool local = same_host_.delivers_locally(dst);
  const size_t n = packet::encode_ib(headers, payload, buffer, icrc_for(local));
  if (n == 0) return;  // unknown opcode or oversized: a bug, nothing to send
  send_frame(dst, buffer.first(n), local);
}

WcStatus Engine::transmit_gathered(const WireAddress& dst, const packet::Headers& headers,
                                   uint32_t length, bool port_up, PayloadGatherer& gatherer) {
  std::span<uint8_t> buffer = frame_buffer();
  const size_t header_bytes = packet::ib_header_bytes(headers);
  if (header_bytes + length > buffer.size()) return WcStatus::kLocLenErr;
  // The payload goes straight to its place in the frame; encoding writes
  // only the headers and the ICRC around it.
  std::span<uint8_t> payload = buffer.subspan(header_bytes, length);
  if (WcStatus st = gatherer.gather(payload); st != WcStatus::kSuccess) return st;
  if (!port_up) return WcStatus::kSuccess;
  const bool local = same_host_.delivers_locally(dst);
  const size_t n = packet::encode_ib(headers, payload, buffer, icrc_for(local));
  if (n != 0) send_frame(dst, buffer.first(n), local);
  return WcStatus::kSuccess;
}

void Engine::transmit_run(const WireAddress& dst, const RunFrame& run) {
  std::span<uint8_t> buffer = frame_buffer();
  const size_t n = encode_run(run, buffer);
  if (n != 0) send_frame(dst, buffer.first(n), same_host_.delivers_locally(dst));
}

void Engine::schedule_timer(TimerQueue::Key key, uint64_t deadline_ns) {
  if (!timers_.schedule(key, deadline_ns)) return;
  const uint64_t sleeping_until = progress_sleeps_until_ns_.load(std::memory_order_seq_cst);
  if (sleeping_until && deadline_ns < sleeping_until) doorbell_.wake();
}

EngineCounters Engine::counters() const {
  EngineCounters c;
  c.frames_sent = counters_.frames_sent.load();
  c.frames_received = counters_.frames_received.load();
  c.frames_dropped_malformed = counters_.frames_dropped_malformed.load(std::memory_order_relaxed);
  c.frames_dropped_no_qp = counters_.frames_dropped_no_qp.load(std::memory_order_relaxed);
  c.frames_dropped_unroutable = counters_.frames_dropped_unroutable.load(std::memory_order_relaxed);
  c.frames_dropped_bad_icrc = counters_.frames_dropped_bad_icrc.load(std::memory_order_relaxed);
  c.frames_dropped_port_down = counters_.frames_dropped_port_down.load(std::memory_order_relaxed);
  c.intake_by_event_waiter = counters_.intake_by_event_waiter.load(std::memory_order_relaxed);
  return c;
}

// ---- HCAs, ports, control

void Engine::add_hca(Hca* hca) {
  std::lock_guard lock(objects_mutex_);
  hcas_.insert(hca);
}

void Engine::remove_hca(Hca* hca) {
  std::lock_guard lock(objects_mutex_);
  hcas_.erase(hca);
}

void Engine::set_port_up(uint32_t device_index, uint8_t port, bool up) {
  std::lock_guard lock(objects_mutex_);
  if (port_up(device_index, port) == up) return;
  if (up)
    ports_down_.fetch_and(~port_bit(device_index, port));
  else
    ports_down_.fetch_or(port_bit(device_index, port));
  for (Hca* hca : hcas_) {
    if (hca->description().index != device_index) continue;
    Hca::Impl& impl = hca->impl();
    {
      std::lock_guard port_lock(impl.port_mutex);
      impl.ports[port - 1].state = up ? PortState::kActive : PortState::kDown;
      impl.ports[port - 1].phys_state = up ? 5 : 3;  // LinkUp / Disabled
    }
    impl.raise(AsyncEvent{up ? AsyncEventType::kPortActive : AsyncEventType::kPortErr, nullptr,
                          nullptr, port});
    if (!up) impl.migrate_away_from(port);
  }
}

void Engine::start_control_server() {
  std::string error;
  control_server_ = control::ControlServer::start(
      [this](std::string_view request) { return control::handle_request(*this, request); },
      error);
  if (!control_server_) std::fprintf(stderr, "softverbs: no control socket: %s\n", error.c_str());
}

}  // namespace softverbs
