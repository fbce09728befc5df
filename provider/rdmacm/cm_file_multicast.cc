// The rdma_cm file's multicast commands: JOIN (IP or any family) gives a
// group's address in MULTICAST_JOIN; attaching the QP is librdmacm's part.
#include <cerrno>

#include "provider/rdmacm/cm_file.h"
#include "provider/rdmacm/cm_file_commands.h"

namespace softverbs::provider {

int CmFile::join_ip_mcast(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_join_ip_mcast>(in, in_length);
  return join(command.id, reinterpret_cast<const sockaddr*>(&command.addr), sizeof command.addr,
              command.uid, command.response);
}

int CmFile::join_mcast(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_join_mcast>(in, in_length);
  if (command.addr_size == 0 || command.addr_size > sizeof command.addr) return EINVAL;
  // The kernel knows full members and send-only full members.
  if (command.join_flags >= RDMA_MC_JOIN_FLAG_RESERVED) return EINVAL;
  return join(command.id, reinterpret_cast<const sockaddr*>(&command.addr), command.addr_size,
              command.uid, command.response);
}

int CmFile::join(uint32_t id, const sockaddr* group, size_t group_length, uint64_t uid,
                 uint64_t response) {
  cm::IpEndpoint address;
  if (int err = endpoint_of(group, group_length, address)) return err;
  rdma_ucm_create_id_resp reply{};
  {
    std::lock_guard lock(mutex_);
    if (!ids_.count(id)) return ENOENT;
    reply.id = next_multicast_++;
    multicasts_[reply.id] = Multicast{id, uid, 0};
  }
  // The response first: librdmacm reads the handle before the event.
  respond(response, reply);
  if (int err = manager_->join_multicast(id, address, reply.id)) {
    std::lock_guard lock(mutex_);
    multicasts_.erase(reply.id);
    return err;
  }
  return 0;
}

int CmFile::leave_mcast(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_destroy_id>(in, in_length);
  rdma_ucm_destroy_id_resp reply{};
  {
    std::lock_guard lock(mutex_);
    auto it = multicasts_.find(command.id);
    if (it == multicasts_.end()) return ENOENT;
    reply.events_reported = it->second.events_reported;
    const uint32_t handle = it->first;
    multicasts_.erase(it);
    std::erase_if(events_, [&](const CmFileEvent& e) { return e.multicast == handle; });
    update_readiness();
  }
  respond(command.response, reply);
  return 0;
}

}  // namespace softverbs::provider
