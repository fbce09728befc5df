// The rdma_cm file's command dispatch, its ids and its event queue.
#include "provider/rdmacm/cm_file.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_user_cm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "provider/rdmacm/cm_file_commands.h"
#include "provider/rdmacm/cm_file_table.h"
#include "provider/rdmacm/kernel_rdma_cm.h"

namespace softverbs::provider {
namespace {

bool valid_port_space(uint16_t port_space) {
  return port_space == RDMA_PS_TCP || port_space == RDMA_PS_UDP || port_space == RDMA_PS_IB ||
         port_space == RDMA_PS_IPOIB;
}

// The kernel derives the QP type from the port space, except for RDMA_PS_IB.
QpType qp_type_of(uint16_t port_space, uint8_t requested) {
  if (port_space == RDMA_PS_UDP || port_space == RDMA_PS_IPOIB) return QpType::kUd;
  if (port_space == RDMA_PS_IB && requested == IBV_QPT_UC) return QpType::kUc;
  if (port_space == RDMA_PS_IB && requested == IBV_QPT_UD) return QpType::kUd;
  if (port_space == RDMA_PS_IB && requested == IBV_QPT_XRC_SEND) return QpType::kXrcSend;
  if (port_space == RDMA_PS_IB && requested == IBV_QPT_XRC_RECV) return QpType::kXrcRecv;
  return QpType::kRc;
}

}  // namespace

CmFile::CmFile(int eventfd, cm::ConnectionManager& manager)
    : manager_(&manager), eventfd_(eventfd) {}

ssize_t CmFile::write_command(const void* buffer, size_t count) {
  rdma_ucm_cmd_hdr header;
  if (count < sizeof header) {
    errno = EINVAL;
    return -1;
  }
  std::memcpy(&header, buffer, sizeof header);
  if (sizeof header + header.in > count) {
    errno = EINVAL;
    return -1;
  }
  const auto* in = static_cast<const uint8_t*>(buffer) + sizeof header;
  if (int err = dispatch(header.cmd, in, header.in, header.out)) {
    errno = err;
    return -1;
  }
  return static_cast<ssize_t>(count);
}

int CmFile::dispatch(uint32_t command, const uint8_t* in, size_t in_length, size_t out_length) {
  bool forwarded = false;
  const int result = forward_if_kernel(command, in, in_length, out_length, forwarded);
  if (forwarded) return result;
  switch (command) {
    case RDMA_USER_CM_CMD_CREATE_ID:
      if (out_length < sizeof(rdma_ucm_create_id_resp)) return ENOSPC;
      return create_id(in, in_length);
    case RDMA_USER_CM_CMD_DESTROY_ID:
      if (out_length < sizeof(rdma_ucm_destroy_id_resp)) return ENOSPC;
      return destroy_id(in, in_length);
    case RDMA_USER_CM_CMD_GET_EVENT:
      if (out_length < offsetof(rdma_ucm_event_resp, reserved)) return ENOSPC;
      return get_event(in, in_length);
    case RDMA_USER_CM_CMD_MIGRATE_ID:
      if (out_length < sizeof(rdma_ucm_migrate_resp)) return ENOSPC;
      return migrate_id(in, in_length);
    case RDMA_USER_CM_CMD_BIND_IP:
      return bind_ip(in, in_length);
    case RDMA_USER_CM_CMD_BIND:
      return bind(in, in_length);
    case RDMA_USER_CM_CMD_RESOLVE_IP:
      return resolve_ip(in, in_length);
    case RDMA_USER_CM_CMD_RESOLVE_ADDR:
      return resolve_addr(in, in_length);
    case RDMA_USER_CM_CMD_RESOLVE_ROUTE:
      return resolve_route(in, in_length);
    case RDMA_USER_CM_CMD_QUERY_ROUTE:
      if (out_length < sizeof(rdma_ucm_query_route_resp)) return ENOSPC;
      return query_route(in, in_length);
    case RDMA_USER_CM_CMD_QUERY:
      return query(in, in_length, out_length);
    case RDMA_USER_CM_CMD_CONNECT:
      return connect(in, in_length);
    case RDMA_USER_CM_CMD_LISTEN:
      return listen(in, in_length);
    case RDMA_USER_CM_CMD_ACCEPT:
      return accept(in, in_length);
    case RDMA_USER_CM_CMD_REJECT:
      return reject(in, in_length);
    case RDMA_USER_CM_CMD_DISCONNECT:
      return disconnect(in, in_length);
    case RDMA_USER_CM_CMD_NOTIFY:
      return notify(in, in_length);
    case RDMA_USER_CM_CMD_SET_OPTION:
      return set_option(in, in_length);
    case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
      if (out_length < sizeof(rdma_ucm_create_id_resp)) return ENOSPC;
      return join_ip_mcast(in, in_length);
    case RDMA_USER_CM_CMD_JOIN_MCAST:
      if (out_length < sizeof(rdma_ucm_create_id_resp)) return ENOSPC;
      return join_mcast(in, in_length);
    case RDMA_USER_CM_CMD_LEAVE_MCAST:
      if (out_length < sizeof(rdma_ucm_destroy_id_resp)) return ENOSPC;
      return leave_mcast(in, in_length);
    case RDMA_USER_CM_CMD_INIT_QP_ATTR:
      if (out_length < sizeof(ib_uverbs_qp_attr)) return ENOSPC;
      return init_qp_attr(in, in_length);
    default:
      // Known to the kernel's ABI, not served: as a kernel without the
      // command would answer. docs/rdmacm.md lists what is not served.
      return command <= RDMA_USER_CM_CMD_JOIN_MCAST ? ENOSYS : EINVAL;
  }
}

bool CmFile::has_id(uint32_t id) {
  std::lock_guard lock(mutex_);
  return ids_.count(id) != 0;
}

int CmFile::create_id(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_create_id>(in, in_length);
  if (!valid_port_space(command.ps)) return EINVAL;
  rdma_ucm_create_id_resp response{};
  // Not under our lock (the manager calls us with its own held). No event
  // can come for the new id before a command on it.
  response.id = manager_->create_id(*this, command.ps, qp_type_of(command.ps, command.qp_type));
  {
    std::lock_guard lock(mutex_);
    Id& id = ids_[response.id];
    id.uid = command.uid;
    id.port_space = command.ps;
    id.qp_type = command.qp_type;
  }
  respond(command.response, response);
  return 0;
}

std::vector<CmFile::PendingRequest> CmFile::drop_pending_requests(uint32_t listen_id) {
  std::vector<PendingRequest> dropped;
  std::erase_if(events_, [&](const CmFileEvent& e) {
    if (!e.connect_request || e.listen_id != listen_id) return false;
    PendingRequest request{e.id, std::nullopt};
    if (auto it = ids_.find(e.id); it != ids_.end() && it->second.forwarded) {
      request.kernel_id = it->second.kernel_id;
      kernel_ids_.erase(it->second.kernel_id);
    }
    dropped.push_back(request);
    ids_.erase(e.id);
    return true;
  });
  return dropped;
}

int CmFile::destroy_id(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_destroy_id>(in, in_length);
  rdma_ucm_destroy_id_resp response{};
  std::vector<PendingRequest> requests;
  std::optional<uint32_t> shadow;
  {
    std::lock_guard lock(mutex_);
    auto it = ids_.find(command.id);
    if (it == ids_.end()) return ENOENT;
    response.events_reported = it->second.events_reported;
    shadow = it->second.shadow_kernel_id;
    if (shadow) kernel_ids_.erase(*shadow);
    ids_.erase(it);
    // Events not yet read go with the id; the eventfd's count is then too
    // high, which get_event() absorbs.
    std::erase_if(events_, [&](const CmFileEvent& e) {
      return e.id == command.id && !e.connect_request;
    });
    // Its groups are left with it.
    std::erase_if(multicasts_, [&](const auto& entry) { return entry.second.id == command.id; });
    requests = drop_pending_requests(command.id);
    update_readiness();
  }
  // Unread requests are refused, as the kernel refuses them.
  release_requests(requests);
  if (shadow) destroy_kernel_id(*shadow);
  manager_->destroy_id(command.id);
  respond(command.response, response);
  return 0;
}

int CmFile::migrate_id(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_migrate_id>(in, in_length);
  std::shared_ptr<CmFile> source = find_cm_file(static_cast<int>(command.fd));
  if (!source) return ::fcntl(static_cast<int>(command.fd), F_GETFD) < 0 ? ENOENT : EINVAL;
  rdma_ucm_migrate_resp response{};
  bool forwarded = false;
  if (source.get() != this) {
    // An id the kernel's CM serves moves between the kernel's files too.
    if (int err = migrate_kernel_id(*source, command.id, forwarded)) return err;
    std::scoped_lock lock(mutex_, source->mutex_);
    auto it = source->ids_.find(command.id);
    if (it == source->ids_.end()) return ENOENT;
    response.events_reported = it->second.events_reported;
    ids_[command.id] = it->second;
    const std::optional<uint32_t> kernel_id =
        forwarded ? std::optional<uint32_t>(it->second.kernel_id) : it->second.shadow_kernel_id;
    if (kernel_id) {
      source->kernel_ids_.erase(*kernel_id);
      kernel_ids_[*kernel_id] = command.id;
    }
    source->ids_.erase(it);
    std::erase_if(source->events_, [&](CmFileEvent& e) {
      if (e.id != command.id || e.connect_request) return false;
      events_.push_back(std::move(e));
      return true;
    });
    source->update_readiness();
    update_readiness();
    arrived_.notify_all();
  } else {
    std::lock_guard lock(mutex_);
    auto it = ids_.find(command.id);
    if (it == ids_.end()) return ENOENT;
    response.events_reported = it->second.events_reported;
    forwarded = it->second.forwarded;
  }
  if (!forwarded) manager_->set_sink(command.id, *this);
  respond(command.response, response);
  return 0;
}

int CmFile::get_event(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_get_event>(in, in_length);
  CmFileEvent event;
  {
    std::unique_lock lock(mutex_);
    while (events_.empty()) {
      // Once closed, the fd may name another file: a reader stays blocked,
      // as on the kernel's file, until the process ends.
      if (!closed_ && (::fcntl(eventfd_, F_GETFL) & O_NONBLOCK)) return EAGAIN;
      reader_tid_ = static_cast<pid_t>(::syscall(SYS_gettid));
      reader_waiting_ = true;
      reader_back_.notify_all();
      arrived_.wait(lock);
      reader_waiting_ = false;
    }
    event = std::move(events_.front());
    events_.pop_front();
    update_readiness();
    // A request counts on its listener (librdmacm acks it there).
    const uint32_t counted = event.connect_request ? event.listen_id : event.id;
    if (event.multicast) {
      if (auto it = multicasts_.find(event.multicast); it != multicasts_.end())
        ++it->second.events_reported;
    } else if (auto it = ids_.find(counted); it != ids_.end()) {
      ++it->second.events_reported;
    }
  }
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(command.response)),
              event.response.data(), event.response.size());
  if (event.connect_request && !event.from_kernel)
    manager_->connect_request_delivered(event.listen_id);
  return 0;
}

void CmFile::post_event(CmFileEvent event) {
  events_.push_back(std::move(event));
  update_readiness();
  arrived_.notify_all();
}

void CmFile::update_readiness() {
  // The eventfd counts 1 while events wait and 0 otherwise, so poll(2)
  // says readable exactly then. write(2) itself is interposed, and this fd
  // is the rdma_cm file: the system calls go straight to the eventfd.
  const bool readable = !events_.empty();
  if (readable == readable_) return;
  readable_ = readable;
  uint64_t value = 1;
  [[maybe_unused]] long done = readable ? ::syscall(SYS_write, eventfd_, &value, sizeof value)
                                        : ::syscall(SYS_read, eventfd_, &value, sizeof value);
}

void CmFile::on_cm_event(const cm::Event& event) {
  std::lock_guard lock(mutex_);
  CmFileEvent queued;
  queued.id = event.id;
  uint64_t uid = 0;
  uint32_t named = event.id;
  if (event.multicast) {
    // Told as the group's: its handle and cookie (the kernel's mc id and uid).
    auto group = multicasts_.find(static_cast<uint32_t>(event.multicast));
    if (group == multicasts_.end()) return;
    uid = group->second.uid;
    named = group->first;
    queued.multicast = group->first;
  } else if (event.type == cm::EventType::kConnectRequest) {
    auto listener = ids_.find(event.listen_id);
    if (listener == ids_.end()) return;
    uid = listener->second.uid;
    Id& id = ids_[event.id];
    id.port_space = listener->second.port_space;
    id.qp_type = listener->second.qp_type;
    id.has_uid = false;
    queued.connect_request = true;
    queued.listen_id = event.listen_id;
  } else {
    auto it = ids_.find(event.id);
    if (it == ids_.end() || !it->second.has_uid) return;
    uid = it->second.uid;
  }
  queued.response = event_response(event, uid, named);
  post_event(std::move(queued));
}

// A program whose event thread loops on rdma_get_cm_event while another
// thread destroys the channel (rping does) works on the kernel because the
// event thread is nearly always back in its read by then, and a read that
// came first blocks for ever; had it come after, it would read the freed
// channel. Here the closing thread can be quicker, so when another thread
// has waited for events on this file and is alive but not waiting now,
// the close gives it up to kEventThreadGraceMs to be back.
void CmFile::wait_for_event_thread(std::unique_lock<std::mutex>& lock) {
  const pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
  if (reader_tid_ == 0 || reader_tid_ == self || reader_waiting_) return;
  if (::syscall(SYS_tgkill, ::getpid(), reader_tid_, 0) != 0) return;  // it ended
  reader_back_.wait_for(lock, std::chrono::milliseconds(kEventThreadGraceMs),
                        [this] { return reader_waiting_; });
}

void CmFile::close() {
  std::vector<uint32_t> ids;
  std::unique_ptr<KernelRdmaCm> kernel;
  {
    std::unique_lock lock(mutex_);
    wait_for_event_thread(lock);
    closed_ = true;
    for (const auto& [handle, id] : ids_)
      if (!id.forwarded) ids.push_back(handle);
    ids_.clear();
    events_.clear();
    multicasts_.clear();
    kernel_ids_.clear();
    kernel_multicasts_.clear();
    update_readiness();
    kernel = std::move(kernel_);
  }
  // Closing the kernel's file destroys its ids; its event thread is
  // stopped first, outside our lock, which that thread takes.
  kernel.reset();
  for (uint32_t id : ids) manager_->destroy_id(id);
}

CmFile::~CmFile() = default;

}  // namespace softverbs::provider
