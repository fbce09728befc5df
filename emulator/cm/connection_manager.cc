// Ids, addresses and listeners. The handshake is in cm_handshake.cc, the
// QP attributes in cm_qp_attributes.cc.
#include "emulator/cm/connection_manager.h"

#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <random>

#include "emulator/cm/cm_agent.h"
#include "emulator/cm/cm_codec.h"
#include "emulator/cm/cm_gsi_router.h"
#include "emulator/cm/cm_id.h"
#include "emulator/cm/cm_path.h"
#include "emulator/engine/engine.h"
#include "emulator/host/device_config.h"
#include "emulator/host/gsi_routing.h"

namespace softverbs::cm {
namespace {

// Every process passes on the connection requests other hosts send to QP1,
// whether it uses the connection manager or not (gsi_routing.h).
[[maybe_unused]] const bool g_gsi_router_installed =
    (install_gsi_router(&route_request_to_agent), true);

constexpr uint32_t kMaxBacklog = 1024;

ConnectionManager* g_process_manager = nullptr;
std::mutex g_process_mutex;

// A forked child has no agent thread: it makes its own manager if it needs
// one, as it makes its own engine.
void forget_manager_in_child() { g_process_manager = nullptr; }

uint32_t random_u32() {
  // Never destroyed: ids may be made while the process exits.
  static auto* mutex = new std::mutex;
  static auto* generator = new std::mt19937{std::random_device{}()};
  std::lock_guard lock(*mutex);
  return static_cast<uint32_t>((*generator)());
}

}  // namespace

uint32_t random_psn() { return random_u32() & 0xffffff; }

bool is_any(const IpEndpoint& endpoint) { return is_any_address(endpoint.address); }

bool is_multicast(const IpEndpoint& endpoint) {
  return endpoint.ipv4 ? (endpoint.address[12] & 0xf0) == 0xe0 : endpoint.address[0] == 0xff;
}

bool is_loopback(const IpEndpoint& endpoint) {
  const Gid& a = endpoint.address;
  if (endpoint.ipv4) return a[12] == 127;
  for (size_t i = 0; i < 15; ++i)
    if (a[i] != 0) return false;
  return a[15] == 1;
}

ConnectionManager* ConnectionManager::process(Errno& err) {
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(nullptr, nullptr, forget_manager_in_child); });
  std::lock_guard lock(g_process_mutex);
  if (g_process_manager) return g_process_manager;
  Engine* engine = Engine::process(err);
  if (!engine) return nullptr;
  // Never destroyed; its agent stops before the engine goes at exit.
  g_process_manager = new ConnectionManager(*engine, engine->cm_ports());
  engine->add_teardown_hook([manager = g_process_manager] { manager->shut_down(); });
  err = 0;
  return g_process_manager;
}

ConnectionManager::ConnectionManager(Engine& engine, CmPortDirectory& ports)
    : engine_(engine), ports_(ports), comm_id_base_(random_u32()) {}

void ConnectionManager::shut_down() {
  std::unique_ptr<CmAgent> agent;
  {
    std::lock_guard lock(mutex_);
    shut_down_ = true;
    agent = std::move(agent_);
  }
  agent.reset();  // joins its thread, which may be waiting for mutex_
}

ConnectionManager::~ConnectionManager() {
  agent_.reset();  // its thread calls into this object
  for (auto& [handle, id] : ids_) release_port(*id);
}

Id* ConnectionManager::find(uint32_t id) {
  auto it = ids_.find(id);
  return it == ids_.end() ? nullptr : it->second.get();
}

const Id* ConnectionManager::find(uint32_t id) const {
  auto it = ids_.find(id);
  return it == ids_.end() ? nullptr : it->second.get();
}

Id* ConnectionManager::find_by_comm_id(uint32_t local_comm_id) {
  for (auto& [handle, id] : ids_)
    if (id->cm != CmState::kNone && id->local_comm_id == local_comm_id) return id.get();
  return nullptr;
}

void ConnectionManager::post(Id& id, Event event) {
  event.id = id.handle;
  id.sink->on_cm_event(event);
}

Errno ConnectionManager::ensure_agent() {
  if (agent_) return 0;
  if (shut_down_) return ENODEV;
  Errno err = 0;
  agent_ = CmAgent::start(
      engine_,
      [this](std::span<const uint8_t> bytes, const AgentAddress& from) {
        CmMad mad;
        // What is not a CM MAD is not for us; a CM ignores it.
        if (decode_cm_mad(bytes, mad) == DecodeError::kNone) on_mad(mad, from);
      },
      [this](uint64_t now_ns) { return on_timer(now_ns); }, err);
  return err;
}

uint32_t ConnectionManager::create_id(EventSink& sink, uint16_t port_space, QpType qp_type) {
  std::lock_guard lock(mutex_);
  auto id = std::make_unique<Id>();
  id->handle = next_handle_++;
  id->sink = &sink;
  id->port_space = port_space;
  id->qp_type = qp_type;
  id->psn = random_psn();
  const uint32_t handle = id->handle;
  ids_[handle] = std::move(id);
  return handle;
}

void ConnectionManager::destroy_id(uint32_t handle) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return;
  end_connection_on_destroy(*id);
  release_port(*id);
  ids_.erase(handle);
}

Errno ConnectionManager::set_sink(uint32_t handle, EventSink& sink) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  id->sink = &sink;
  return 0;
}

void ConnectionManager::release_port(Id& id) {
  if (id.port_handle) ports_.release(id.port_handle);
  id.port_handle = 0;
}

Errno ConnectionManager::bind(uint32_t handle, const IpEndpoint& address) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  if (id->state != IdState::kIdle) return EINVAL;
  return bind_locked(*id, address);
}

Errno ConnectionManager::bind_locked(Id& id, const IpEndpoint& address) {
  // As the kernel: a loopback address binds like the any address, to no
  // device, and its port is taken on every address.
  const bool any_address = is_any(address) || is_loopback(address);
  const DeviceDescription* device = nullptr;
  if (!any_address) {
    device = find_device_by_address(address.address);
    if (!device) return EADDRNOTAVAIL;
  }
  if (Errno err = ensure_agent()) return err;
  IpEndpoint bound = address;
  Gid held = any_address ? Gid{} : address.address;
  if (Errno err = ports_.bind(id.port_space, held, bound.port, agent_->qpn(), id.port_handle))
    return err;
  id.source = bound;
  id.destination = IpEndpoint{{}, 0, bound.ipv4};
  id.has_device = device != nullptr;
  if (device) id.device_index = device->index;
  id.state = IdState::kAddrBound;
  return 0;
}

Errno ConnectionManager::resolve_address(uint32_t handle, const IpEndpoint* source,
                                         const IpEndpoint& destination) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  if (id->state == IdState::kIdle) {
    IpEndpoint any{{}, 0, destination.ipv4};
    if (Errno err = bind_locked(*id, source ? *source : any)) return err;
  }
  if (id->state != IdState::kAddrBound) return EINVAL;
  if (id->source.ipv4 != destination.ipv4) return EINVAL;

  // The destination's own device carries the connection when the source is
  // not pinned to one: a host reaches its own address without leaving it.
  const IpEndpoint target = is_any(destination) ? loopback_of(destination) : destination;
  if (is_multicast(destination)) return resolve_multicast(*id, destination);
  const DeviceDescription* remote = find_device_by_address(target.address);
  Event event;
  if (!remote) return resolve_off_host(*id, destination);
  if (!id->has_device) {
    id->has_device = true;
    id->device_index = remote->index;
    if (is_any(id->source)) id->source.address = target.address;
  }
  id->destination = destination;
  id->state = IdState::kAddrResolved;
  event.type = EventType::kAddrResolved;
  post(*id, event);
  return 0;
}

// Another host's address: reached over the UDP wire (when it runs) from a
// RoCE device's address, the one the kernel's routing leaves from unless
// the id is bound.
Errno ConnectionManager::resolve_off_host(Id& id, const IpEndpoint& destination) {
  Gid source{};
  const bool bound = !is_any(id.source) && !is_loopback(id.source);
  if (bound) source = id.source.address;
  const DeviceDescription* local = nullptr;
  if (bound || source_toward(destination, source)) local = find_device_by_address(source);
  Event event;
  if (!engine_.reaches_other_hosts() || !local || local->link_layer != LinkLayer::kEthernet ||
      (id.has_device && id.device_index != local->index)) {
    event.type = EventType::kAddrError;
    event.status = -EHOSTUNREACH;
    post(id, event);
    return 0;
  }
  id.has_device = true;
  id.device_index = local->index;
  id.source.address = source;
  id.destination = destination;
  id.state = IdState::kAddrResolved;
  event.type = EventType::kAddrResolved;
  post(id, event);
  return 0;
}

Errno ConnectionManager::resolve_multicast(Id& id, const IpEndpoint& group) {
  // A group is on every device: the source's, or softverbs0's by default,
  // sending from its first address of the group's family off loopback (as
  // a default route would), else from loopback.
  if (!id.has_device) {
    id.has_device = true;
    id.device_index = 0;
    if (is_any(id.source)) {
      id.source.address = loopback_of(group).address;
      for (const Gid& address : device_at(0).addresses) {
        const IpEndpoint candidate{address, 0, is_ipv4_mapped(address)};
        if (candidate.ipv4 == group.ipv4 && !is_loopback(candidate)) {
          id.source.address = address;
          break;
        }
      }
    }
  }
  id.destination = group;
  id.state = IdState::kAddrResolved;
  Event event;
  event.type = EventType::kAddrResolved;
  post(id, event);
  return 0;
}

Errno ConnectionManager::resolve_route(uint32_t handle) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  if (id->state != IdState::kAddrResolved || !id->has_device) return EINVAL;
  id->path = resolve_path(id->device_index, id->source, id->destination);
  id->path.traffic_class = id->type_of_service;
  if (id->ack_timeout_option) id->path.packet_life_time = id->ack_timeout_option - 1;
  id->has_path = true;
  id->state = IdState::kRouteResolved;
  Event event;
  event.type = EventType::kRouteResolved;
  post(*id, event);
  return 0;
}

Errno ConnectionManager::query(uint32_t handle, IdAddressing& out) const {
  std::lock_guard lock(mutex_);
  const Id* id = find(handle);
  if (!id) return ENOENT;
  out = IdAddressing{};
  out.has_device = id->has_device;
  out.device_index = id->device_index;
  out.source = id->source;
  out.destination = id->destination;
  out.port_space = id->port_space;
  out.has_path = id->has_path;
  out.path = id->path;
  if (id->has_path) {
    out.sgid = id->path.sgid;
    out.dgid = id->path.dgid;
  } else if (id->has_device) {
    out.sgid = gid_of(id->device_index, id->source);
  }
  return 0;
}

Errno ConnectionManager::listen(uint32_t handle, int backlog) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  if (id->state == IdState::kIdle) {
    if (Errno err = bind_locked(*id, IpEndpoint{})) return err;
  }
  if (id->state != IdState::kAddrBound) return EINVAL;
  if (Errno err = ports_.listen(id->port_handle)) return err;
  id->backlog_left = backlog <= 0 || static_cast<uint32_t>(backlog) > kMaxBacklog
                         ? kMaxBacklog
                         : static_cast<uint32_t>(backlog);
  id->state = IdState::kListen;
  return 0;
}

Errno ConnectionManager::set_type_of_service(uint32_t handle, uint8_t tos) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  id->type_of_service = tos;
  return 0;
}

Errno ConnectionManager::set_ack_timeout(uint32_t handle, uint8_t timeout) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  if (id->qp_type != QpType::kRc && id->qp_type != QpType::kXrcSend) return EINVAL;
  id->ack_timeout_option = std::min<uint8_t>(timeout, 31);
  return 0;
}

Errno ConnectionManager::set_ipv6_only(uint32_t handle, bool only) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  if (id->state != IdState::kIdle && id->state != IdState::kAddrBound) return EINVAL;
  id->ipv6_only = only;
  return 0;
}

Errno ConnectionManager::set_reuse_address(uint32_t handle, bool reuse) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  if (!(id->state == IdState::kIdle || (reuse && id->state != IdState::kListen))) return EINVAL;
  id->reuse_address = reuse;
  return 0;
}

void ConnectionManager::connect_request_delivered(uint32_t listen_id) {
  std::lock_guard lock(mutex_);
  if (Id* listener = find(listen_id); listener && listener->state == IdState::kListen)
    ++listener->backlog_left;
}

}  // namespace softverbs::cm
