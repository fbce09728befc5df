// The rdma_cm file's ids that the kernel's CM serves: those bound to, or
// resolving toward, an address of a kernel RDMA device (kernel_devices.h),
// so that a real HCA (or rxe) keeps working in a process whose soft
// devices this file serves. An id starts soft; the command that names such
// an address moves it to the kernel's file: a kernel id is made with the
// same cookie, port space and options, the soft one is let go, and from
// then on every command on the id is written to the kernel's file with
// the kernel's handle in place of ours. The kernel's events come back
// through the same queue as the soft devices' (kernel_rdma_cm.h), with our
// handles in them, so one fd serves both to librdmacm.
//
// What stays ours for a forwarded id: the handle librdmacm knows, the
// count of events it has read (DESTROY_ID reports that count, and
// librdmacm waits for exactly that many acks), the handles of its
// multicast groups. A listener on the any address listens on both.

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "provider/rdmacm/cm_file.h"
#include "provider/rdmacm/cm_file_commands.h"
#include "provider/rdmacm/kernel_devices.h"
#include "provider/rdmacm/kernel_rdma_cm.h"

namespace softverbs::provider {
namespace {

// Where a command names its id (the kernel's structs differ).
std::optional<size_t> id_offset(uint32_t command) {
  switch (command) {
    case RDMA_USER_CM_CMD_DESTROY_ID: return offsetof(rdma_ucm_destroy_id, id);
    case RDMA_USER_CM_CMD_BIND_IP: return offsetof(rdma_ucm_bind_ip, id);
    case RDMA_USER_CM_CMD_RESOLVE_IP: return offsetof(rdma_ucm_resolve_ip, id);
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE: return offsetof(rdma_ucm_resolve_route, id);
    case RDMA_USER_CM_CMD_QUERY_ROUTE: return offsetof(rdma_ucm_query, id);
    case RDMA_USER_CM_CMD_CONNECT: return offsetof(rdma_ucm_connect, id);
    case RDMA_USER_CM_CMD_LISTEN: return offsetof(rdma_ucm_listen, id);
    case RDMA_USER_CM_CMD_ACCEPT: return offsetof(rdma_ucm_accept, id);
    case RDMA_USER_CM_CMD_REJECT: return offsetof(rdma_ucm_reject, id);
    case RDMA_USER_CM_CMD_DISCONNECT: return offsetof(rdma_ucm_disconnect, id);
    case RDMA_USER_CM_CMD_INIT_QP_ATTR: return offsetof(rdma_ucm_init_qp_attr, id);
    case RDMA_USER_CM_CMD_NOTIFY: return offsetof(rdma_ucm_notify, id);
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST: return offsetof(rdma_ucm_join_ip_mcast, id);
    case RDMA_USER_CM_CMD_SET_OPTION: return offsetof(rdma_ucm_set_option, id);
    case RDMA_USER_CM_CMD_BIND: return offsetof(rdma_ucm_bind, id);
    case RDMA_USER_CM_CMD_RESOLVE_ADDR: return offsetof(rdma_ucm_resolve_addr, id);
    case RDMA_USER_CM_CMD_QUERY: return offsetof(rdma_ucm_query, id);
    case RDMA_USER_CM_CMD_JOIN_MCAST: return offsetof(rdma_ucm_join_mcast, id);
    default: return std::nullopt;  // CREATE_ID, GET_EVENT, LEAVE_MCAST, MIGRATE_ID
  }
}

// The kernel's event numbers are the connection manager's (cm_types.h).
constexpr uint32_t event_number(cm::EventType type) { return static_cast<uint32_t>(type); }
constexpr uint32_t kConnectRequest = event_number(cm::EventType::kConnectRequest);
constexpr uint32_t kMulticastJoin = event_number(cm::EventType::kMulticastJoin);
constexpr uint32_t kMulticastError = event_number(cm::EventType::kMulticastError);

// Multicast answers kept while their join's command is still on its way
// back; more than a few means they belong to no join of ours.
constexpr size_t kMaxEarlyMulticastEvents = 16;

uint32_t read_u32(const uint8_t* in, size_t in_length, size_t offset) {
  uint32_t value = 0;
  if (offset + sizeof value <= in_length) std::memcpy(&value, in + offset, sizeof value);
  return value;
}

// SOFTVERBS_RDMA_CM=soft keeps every id here, real devices' addresses too.
bool forwarding_wanted() {
  const char* value = std::getenv("SOFTVERBS_RDMA_CM");
  return !(value && std::strcmp(value, "soft") == 0);
}

}  // namespace

bool CmFile::forwarding_possible() {
  std::lock_guard lock(mutex_);
  if (kernel_present_ < 0) kernel_present_ = forwarding_wanted() && kernel_rdma_present();
  return kernel_present_ == 1;
}

KernelRdmaCm* CmFile::kernel_file() {
  std::lock_guard lock(mutex_);
  if (kernel_ || closed_) return kernel_.get();
  kernel_ = KernelRdmaCm::open();
  if (kernel_) kernel_->start_events([this](const rdma_ucm_event_resp& e) { on_kernel_event(e); });
  return kernel_.get();
}

int CmFile::forward_if_kernel(uint32_t command, const uint8_t* in, size_t in_length,
                              size_t out_length, bool& handled) {
  handled = false;
  if (command == RDMA_USER_CM_CMD_LEAVE_MCAST) {
    const auto leave = command_of<rdma_ucm_destroy_id>(in, in_length);
    uint32_t kernel_multicast = 0;
    {
      std::lock_guard lock(mutex_);
      auto it = multicasts_.find(leave.id);
      if (it == multicasts_.end() || !it->second.kernel_id) return 0;
      kernel_multicast = *it->second.kernel_id;
    }
    handled = true;
    return forward_leave(leave.id, kernel_multicast, leave.response);
  }
  const std::optional<size_t> offset = id_offset(command);
  if (!offset) return 0;
  const uint32_t id = read_u32(in, in_length, *offset);
  uint32_t kernel_id = 0;
  bool forwarded = false;
  {
    std::lock_guard lock(mutex_);
    auto it = ids_.find(id);
    if (it == ids_.end()) return 0;  // the soft path says ENOENT
    forwarded = it->second.forwarded;
    kernel_id = it->second.kernel_id;
  }
  if (!forwarded) {
    if (!moves_to_kernel(command, in, in_length, id)) return 0;
    if (adopt_into_kernel(id) != 0) return 0;  // no kernel file after all: stay soft
    std::lock_guard lock(mutex_);
    auto it = ids_.find(id);
    if (it == ids_.end()) return 0;
    kernel_id = it->second.kernel_id;
  }
  handled = true;
  switch (command) {
    case RDMA_USER_CM_CMD_DESTROY_ID:
      if (out_length < sizeof(rdma_ucm_destroy_id_resp)) return ENOSPC;
      return forward_destroy(id, command_of<rdma_ucm_destroy_id>(in, in_length).response);
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
    case RDMA_USER_CM_CMD_JOIN_MCAST:
      return forward_join(command, in, in_length, out_length, id, kernel_id);
    case RDMA_USER_CM_CMD_ACCEPT: {
      std::lock_guard lock(mutex_);
      if (auto it = ids_.find(id); it != ids_.end())
        it->second.uid = command_of<rdma_ucm_accept>(in, in_length).uid;
      break;
    }
    default: break;
  }
  return forward(command, in, in_length, out_length, *offset, kernel_id);
}

// The commands that name an address decide: an address of a kernel RDMA
// device (bound to it, or reached through it) is the kernel's.
bool CmFile::moves_to_kernel(uint32_t command, const uint8_t* in, size_t in_length,
                             uint32_t id) {
  const bool binds = command == RDMA_USER_CM_CMD_BIND_IP || command == RDMA_USER_CM_CMD_BIND;
  const bool resolves =
      command == RDMA_USER_CM_CMD_RESOLVE_IP || command == RDMA_USER_CM_CMD_RESOLVE_ADDR;
  if ((!binds && !resolves) || !forwarding_possible()) return false;
  if (binds) {
    sockaddr_storage address{};
    if (command == RDMA_USER_CM_CMD_BIND_IP) {
      const auto c = command_of<rdma_ucm_bind_ip>(in, in_length);
      std::memcpy(&address, &c.addr, sizeof c.addr);
    } else {
      const auto c = command_of<rdma_ucm_bind>(in, in_length);
      std::memcpy(&address, &c.addr, std::min<size_t>(c.addr_size, sizeof address));
    }
    if (address.ss_family != AF_INET && address.ss_family != AF_INET6) return false;
    return kernel_owns_address(reinterpret_cast<const sockaddr*>(&address));
  }
  // A source given, or bound here already, to a device's address decides;
  // else the route to the destination does.
  sockaddr_storage source{}, destination{};
  if (command == RDMA_USER_CM_CMD_RESOLVE_IP) {
    const auto c = command_of<rdma_ucm_resolve_ip>(in, in_length);
    std::memcpy(&source, &c.src_addr, sizeof c.src_addr);
    std::memcpy(&destination, &c.dst_addr, sizeof c.dst_addr);
  } else {
    const auto c = command_of<rdma_ucm_resolve_addr>(in, in_length);
    if (c.src_size) std::memcpy(&source, &c.src_addr, std::min<size_t>(c.src_size, sizeof source));
    std::memcpy(&destination, &c.dst_addr, std::min<size_t>(c.dst_size, sizeof destination));
  }
  cm::IdAddressing addressing;
  if (manager_->query(id, addressing) == 0 && addressing.has_device) return false;
  // A source address named (not the any address) decides alone.
  const auto* from = reinterpret_cast<const sockaddr*>(&source);
  if ((source.ss_family == AF_INET || source.ss_family == AF_INET6) && !is_any_or_loopback(from))
    return kernel_owns_address(from);
  if (destination.ss_family != AF_INET && destination.ss_family != AF_INET6) return false;
  return kernel_reaches(reinterpret_cast<const sockaddr*>(&destination));
}

int CmFile::create_kernel_id(const Id& id, uint32_t& kernel_id) {
  KernelRdmaCm* kernel = kernel_file();
  if (!kernel) return ENODEV;
  rdma_ucm_create_id_resp created{};
  rdma_ucm_create_id create{};
  create.uid = id.uid;
  create.response = reinterpret_cast<uintptr_t>(&created);
  create.ps = id.port_space;
  create.qp_type = id.qp_type;
  if (int err = kernel->command(RDMA_USER_CM_CMD_CREATE_ID, &create, sizeof create,
                                sizeof created))
    return err;
  for (const Id::Option& option : id.options) {
    rdma_ucm_set_option set{};
    set.optval = reinterpret_cast<uintptr_t>(option.value.data());
    set.id = created.id;
    set.level = option.level;
    set.optname = option.name;
    set.optlen = static_cast<uint32_t>(option.value.size());
    kernel->command(RDMA_USER_CM_CMD_SET_OPTION, &set, sizeof set, 0);
  }
  kernel_id = created.id;
  return 0;
}

int CmFile::adopt_into_kernel(uint32_t handle) {
  Id copy;
  {
    std::lock_guard lock(mutex_);
    auto it = ids_.find(handle);
    if (it == ids_.end()) return ENOENT;
    copy = it->second;
    if (copy.shadow_kernel_id) {
      // Bound to the any address, its port held there: that kernel id
      // carries on, with the port.
      it->second.forwarded = true;
      it->second.kernel_id = *copy.shadow_kernel_id;
      it->second.shadow_kernel_id.reset();
    }
  }
  if (copy.shadow_kernel_id) {
    manager_->destroy_id(handle);
    return 0;
  }
  uint32_t kernel_id = 0;
  if (int err = create_kernel_id(copy, kernel_id)) return err;
  if (int err = record_kernel_id(handle, kernel_id, [&](Id& id) {
        id.forwarded = true;
        id.kernel_id = kernel_id;
      }))
    return err;
  // The soft id goes; the handle stays librdmacm's.
  manager_->destroy_id(handle);
  return 0;
}

int CmFile::forward(uint32_t command, const uint8_t* in, size_t in_length, size_t out_length,
                    size_t id_offset, uint32_t kernel_id) {
  if (in_length > UINT16_MAX || out_length > UINT16_MAX) return EINVAL;
  std::vector<uint8_t> bytes(in, in + in_length);
  if (id_offset + sizeof kernel_id <= bytes.size())
    std::memcpy(bytes.data() + id_offset, &kernel_id, sizeof kernel_id);
  KernelRdmaCm* kernel = kernel_file();
  if (!kernel) return ENODEV;
  return kernel->command(command, bytes.data(), static_cast<uint16_t>(bytes.size()),
                         static_cast<uint16_t>(out_length));
}

void CmFile::destroy_kernel_id(uint32_t kernel_id) {
  KernelRdmaCm* kernel = kernel_.get();
  if (!kernel) return;
  rdma_ucm_destroy_id_resp ignored{};
  rdma_ucm_destroy_id destroy{};
  destroy.response = reinterpret_cast<uintptr_t>(&ignored);
  destroy.id = kernel_id;
  kernel->command(RDMA_USER_CM_CMD_DESTROY_ID, &destroy, sizeof destroy, sizeof ignored);
}

// The kernel counts the events its file gave out; librdmacm must be told
// how many it read from ours (the rest went with the id).
int CmFile::forward_destroy(uint32_t handle, uint64_t response) {
  rdma_ucm_destroy_id_resp reply{};
  uint32_t kernel_id = 0;
  std::vector<PendingRequest> requests;
  {
    std::lock_guard lock(mutex_);
    auto it = ids_.find(handle);
    if (it == ids_.end()) return ENOENT;
    reply.events_reported = it->second.events_reported;
    kernel_id = it->second.kernel_id;
    ids_.erase(it);
    kernel_ids_.erase(kernel_id);
    std::erase_if(events_, [&](const CmFileEvent& e) {
      return e.id == handle && !e.connect_request;
    });
    std::erase_if(multicasts_, [&](const auto& entry) {
      if (entry.second.id != handle) return false;
      if (entry.second.kernel_id) kernel_multicasts_.erase(*entry.second.kernel_id);
      return true;
    });
    requests = drop_pending_requests(handle);
    update_readiness();
  }
  // Unread requests are the kernel's ids: they go with the listener.
  release_requests(requests);
  destroy_kernel_id(kernel_id);
  respond(response, reply);
  return 0;
}

void CmFile::release_requests(const std::vector<PendingRequest>& requests) {
  for (const PendingRequest& request : requests) {
    if (request.kernel_id) {
      destroy_kernel_id(*request.kernel_id);
    } else {
      manager_->destroy_id(request.id);
    }
  }
}

int CmFile::forward_join(uint32_t command, const uint8_t* in, size_t in_length,
                         size_t out_length, uint32_t id, uint32_t kernel_id) {
  if (out_length < sizeof(rdma_ucm_create_id_resp)) return ENOSPC;
  // The kernel's answer comes here; librdmacm gets a handle of ours.
  rdma_ucm_create_id_resp joined{};
  std::vector<uint8_t> bytes(in, in + in_length);
  uint64_t uid = 0, response = 0;
  size_t response_offset = 0;
  if (command == RDMA_USER_CM_CMD_JOIN_IP_MCAST) {
    const auto c = command_of<rdma_ucm_join_ip_mcast>(in, in_length);
    uid = c.uid;
    response = c.response;
    response_offset = offsetof(rdma_ucm_join_ip_mcast, response);
  } else {
    const auto c = command_of<rdma_ucm_join_mcast>(in, in_length);
    uid = c.uid;
    response = c.response;
    response_offset = offsetof(rdma_ucm_join_mcast, response);
  }
  const uint64_t ours = reinterpret_cast<uintptr_t>(&joined);
  if (response_offset + sizeof ours <= bytes.size())
    std::memcpy(bytes.data() + response_offset, &ours, sizeof ours);
  rdma_ucm_create_id_resp reply{};
  {
    // Known before the kernel can report the join.
    std::lock_guard lock(mutex_);
    reply.id = next_multicast_++;
    multicasts_[reply.id] = Multicast{id, uid, 0, std::nullopt};
  }
  const int err = forward(command, bytes.data(), bytes.size(), out_length,
                          *id_offset(command), kernel_id);
  std::lock_guard lock(mutex_);
  if (err) {
    multicasts_.erase(reply.id);
    return err;
  }
  if (auto it = multicasts_.find(reply.id); it != multicasts_.end()) {
    it->second.kernel_id = joined.id;
    kernel_multicasts_[joined.id] = reply.id;
  }
  // The response first: librdmacm reads the handle before the event. (It
  // is read after this call returns, and the event only after that.)
  respond(response, reply);
  std::vector<rdma_ucm_event_resp> early;
  std::erase_if(early_multicast_events_, [&](const rdma_ucm_event_resp& e) {
    if (e.id != joined.id) return false;
    early.push_back(e);
    return true;
  });
  for (const rdma_ucm_event_resp& e : early) queue_kernel_event_locked(e);
  return 0;
}

int CmFile::forward_leave(uint32_t multicast, uint32_t kernel_multicast, uint64_t response) {
  rdma_ucm_destroy_id_resp ignored{};
  rdma_ucm_destroy_id leave{};
  leave.response = reinterpret_cast<uintptr_t>(&ignored);
  leave.id = kernel_multicast;
  KernelRdmaCm* kernel = kernel_file();
  if (!kernel) return ENODEV;
  if (int err = kernel->command(RDMA_USER_CM_CMD_LEAVE_MCAST, &leave, sizeof leave,
                                sizeof ignored))
    return err;
  rdma_ucm_destroy_id_resp reply{};
  {
    std::lock_guard lock(mutex_);
    auto it = multicasts_.find(multicast);
    if (it != multicasts_.end()) {
      reply.events_reported = it->second.events_reported;
      multicasts_.erase(it);
    }
    kernel_multicasts_.erase(kernel_multicast);
    std::erase_if(events_, [&](const CmFileEvent& e) { return e.multicast == multicast; });
    update_readiness();
  }
  respond(response, reply);
  return 0;
}

bool CmFile::has_device_address(const cm::IpEndpoint& address) {
  sockaddr_storage bytes{};
  write_sockaddr(address, &bytes, sizeof bytes);
  return !is_any_or_loopback(reinterpret_cast<const sockaddr*>(&bytes));
}

int CmFile::hold_port_on_kernel(uint32_t handle, const cm::IpEndpoint& address) {
  Id copy;
  {
    std::lock_guard lock(mutex_);
    auto it = ids_.find(handle);
    if (it == ids_.end()) return ENOENT;
    if (it->second.shadow_kernel_id) return 0;
    copy = it->second;
  }
  uint32_t kernel_id = 0;
  if (create_kernel_id(copy, kernel_id) != 0) return 0;  // no kernel file: nothing to hold
  rdma_ucm_bind bind{};
  bind.id = kernel_id;
  bind.addr_size = static_cast<uint16_t>(write_sockaddr(address, &bind.addr, sizeof bind.addr));
  KernelRdmaCm* kernel = kernel_file();
  if (!kernel) return 0;  // closed meanwhile
  if (int err = kernel->command(RDMA_USER_CM_CMD_BIND, &bind, sizeof bind, 0)) {
    destroy_kernel_id(kernel_id);
    return err;
  }
  return record_kernel_id(handle, kernel_id, [&](Id& id) { id.shadow_kernel_id = kernel_id; });
}

int CmFile::record_kernel_id(uint32_t handle, uint32_t kernel_id,
                             const std::function<void(Id&)>& record) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = ids_.find(handle); it != ids_.end()) {
      record(it->second);
      kernel_ids_[kernel_id] = handle;
      return 0;
    }
  }
  destroy_kernel_id(kernel_id);  // the id went while the kernel's was made
  return ENOENT;
}

void CmFile::drop_kernel_hold(uint32_t handle) {
  std::optional<uint32_t> shadow;
  {
    std::lock_guard lock(mutex_);
    auto it = ids_.find(handle);
    if (it == ids_.end()) return;
    shadow = it->second.shadow_kernel_id;
    it->second.shadow_kernel_id.reset();
    if (shadow) kernel_ids_.erase(*shadow);
  }
  if (shadow) destroy_kernel_id(*shadow);
}

// A soft listener on the any address (or loopback, which binds like it)
// listens on the kernel's devices too, as the kernel's listener hears
// every device: on the kernel id that holds its port. Best effort.
void CmFile::listen_on_kernel_too(uint32_t handle, uint32_t backlog) {
  if (!forwarding_possible()) return;
  cm::IdAddressing addressing;
  if (manager_->query(handle, addressing) != 0 || addressing.has_device) return;
  // An id listening unbound took an ephemeral port just now.
  hold_port_on_kernel(handle, addressing.source);
  std::optional<uint32_t> shadow;
  {
    std::lock_guard lock(mutex_);
    auto it = ids_.find(handle);
    if (it == ids_.end()) return;
    shadow = it->second.shadow_kernel_id;
  }
  if (!shadow) return;
  rdma_ucm_listen listen{};
  listen.id = *shadow;
  listen.backlog = backlog;
  if (KernelRdmaCm* kernel = kernel_file())
    kernel->command(RDMA_USER_CM_CMD_LISTEN, &listen, sizeof listen, 0);
}

int CmFile::migrate_kernel_id(CmFile& source, uint32_t handle, bool& forwarded) {
  uint32_t kernel_id = 0;
  int source_fd = -1;
  {
    std::lock_guard lock(source.mutex_);
    auto it = source.ids_.find(handle);
    if (it == source.ids_.end()) return ENOENT;
    forwarded = it->second.forwarded;
    // The kernel id that goes with it: its own, or the one holding its port.
    if (forwarded) {
      kernel_id = it->second.kernel_id;
    } else if (it->second.shadow_kernel_id) {
      kernel_id = *it->second.shadow_kernel_id;
    } else {
      return 0;
    }
    if (source.kernel_) source_fd = source.kernel_->fd();
  }
  KernelRdmaCm* kernel = kernel_file();
  if (!kernel || source_fd < 0) return ENODEV;
  rdma_ucm_migrate_resp ignored{};
  rdma_ucm_migrate_id migrate{};
  migrate.response = reinterpret_cast<uintptr_t>(&ignored);
  migrate.id = kernel_id;
  migrate.fd = static_cast<uint32_t>(source_fd);
  return kernel->command(RDMA_USER_CM_CMD_MIGRATE_ID, &migrate, sizeof migrate, sizeof ignored);
}

void CmFile::record_option(uint32_t handle, uint32_t level, uint32_t name,
                           const uint8_t* value, size_t length) {
  std::lock_guard lock(mutex_);
  auto it = ids_.find(handle);
  if (it == ids_.end()) return;
  auto& options = it->second.options;
  std::erase_if(options, [&](const Id::Option& o) { return o.level == level && o.name == name; });
  options.push_back(Id::Option{level, name, std::vector<uint8_t>(value, value + length)});
}

// On the kernel file's event thread: the event, told with our handles.
void CmFile::on_kernel_event(const rdma_ucm_event_resp& kernel_event) {
  std::lock_guard lock(mutex_);
  if (closed_) return;
  queue_kernel_event_locked(kernel_event);
}

void CmFile::queue_kernel_event_locked(const rdma_ucm_event_resp& kernel_event) {
  rdma_ucm_event_resp told = kernel_event;
  CmFileEvent queued;
  queued.from_kernel = true;
  if (kernel_event.event == kMulticastJoin ||
      kernel_event.event == kMulticastError) {
    auto group = kernel_multicasts_.find(kernel_event.id);
    if (group == kernel_multicasts_.end()) {
      // The join's answer may come before the join's command has returned
      // the group's handle to us: kept until it has (forward_join).
      if (early_multicast_events_.size() < kMaxEarlyMulticastEvents)
        early_multicast_events_.push_back(kernel_event);
      return;
    }
    auto joined = multicasts_.find(group->second);
    if (joined == multicasts_.end()) return;
    told.id = group->second;
    queued.multicast = group->second;
    queued.id = joined->second.id;
  } else if (kernel_event.event == kConnectRequest) {
    // For a new kernel id, on the listener the cookie names.
    uint32_t listener = 0;
    for (const auto& [handle, id] : ids_) {
      if ((id.forwarded || id.shadow_kernel_id) && id.uid == kernel_event.uid) {
        listener = handle;
        break;
      }
    }
    if (listener == 0) return;
    const Id& listening = ids_[listener];
    const uint32_t alias = next_kernel_alias_++;
    Id& id = ids_[alias];
    id.port_space = listening.port_space;
    id.qp_type = listening.qp_type;
    id.uid = 0;
    id.forwarded = true;
    id.kernel_id = kernel_event.id;
    kernel_ids_[kernel_event.id] = alias;
    told.id = alias;
    queued.id = alias;
    queued.connect_request = true;
    queued.listen_id = listener;
  } else {
    auto it = kernel_ids_.find(kernel_event.id);
    if (it == kernel_ids_.end()) return;
    told.id = it->second;
    queued.id = it->second;
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(&told);
  queued.response.assign(bytes, bytes + sizeof told);
  post_event(std::move(queued));
}

}  // namespace softverbs::provider
