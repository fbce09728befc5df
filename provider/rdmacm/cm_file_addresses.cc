// The rdma_cm file's address commands: BIND, RESOLVE, QUERY. AF_IB
// addresses are refused, so librdmacm uses the IP-only command set.
#include <endian.h>
#include <infiniband/ib.h>

#include <cerrno>

#include "emulator/host/device_config.h"
#include "provider/rdmacm/cm_file.h"
#include "provider/rdmacm/cm_file_commands.h"

namespace softverbs::provider {
namespace {

// What QUERY says of the device: the raw big-endian node GUID librdmacm
// matches against ibv_get_device_guid(), and no kernel index.
constexpr uint32_t kNoDeviceIndex = 0xffffffff;

uint64_t node_guid_of(const cm::IdAddressing& addressing) {
  if (!addressing.has_device) return 0;
  return htobe64(configured_devices().at(addressing.device_index).node_guid);
}

// The service ID of one end (the kernel's rdma_get_service_id), big-endian.
uint64_t service_id_of(uint16_t port_space, uint16_t port) {
  return htobe64(uint64_t{port_space} << 16 | port);
}

void write_ib_address(const Gid& gid, uint16_t pkey, uint64_t service_id, void* out) {
  sockaddr_ib ib{};
  ib.sib_family = AF_IB;
  ib.sib_pkey = htobe16(pkey);
  std::memcpy(&ib.sib_addr, gid.data(), 16);
  ib.sib_sid = service_id;
  std::memcpy(out, &ib, sizeof ib);
}

}  // namespace

int CmFile::bind_ip(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_bind_ip>(in, in_length);
  cm::IpEndpoint address;
  if (int err = endpoint_of(reinterpret_cast<const sockaddr*>(&command.addr),
                            sizeof command.addr, address))
    return err;
  if (!has_id(command.id)) return ENOENT;
  return bind_soft(command.id, address);
}

int CmFile::bind(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_bind>(in, in_length);
  if (command.reserved || command.addr_size == 0) return EINVAL;
  cm::IpEndpoint address;
  if (int err = endpoint_of(reinterpret_cast<const sockaddr*>(&command.addr),
                            command.addr_size, address))
    return err;
  if (!has_id(command.id)) return ENOENT;
  return bind_soft(command.id, address);
}

// Beside the kernel's CM, a port of the any address (or loopback, which
// binds like it) is the port on every device: it is held on the kernel's
// file too (cm_file_forwarding.cc), first when the program names it, so
// that a port the kernel's devices use is refused as the kernel refuses it.
int CmFile::bind_soft(uint32_t id, const cm::IpEndpoint& address) {
  const bool held_on_kernel = !has_device_address(address) && forwarding_possible();
  if (held_on_kernel && address.port != 0) {
    if (int err = hold_port_on_kernel(id, address)) return err;
  }
  if (int err = manager_->bind(id, address)) {
    if (held_on_kernel) drop_kernel_hold(id);
    return err;
  }
  if (held_on_kernel && address.port == 0) {
    cm::IdAddressing bound;
    if (manager_->query(id, bound) == 0) {
      cm::IpEndpoint chosen = address;
      chosen.port = bound.source.port;
      hold_port_on_kernel(id, chosen);  // best effort: the soft devices have it
    }
  }
  return 0;
}

int CmFile::resolve_ip(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_resolve_ip>(in, in_length);
  cm::IpEndpoint source, destination;
  const bool has_source = command.src_addr.sin6_family != 0;
  if (has_source) {
    if (int err = endpoint_of(reinterpret_cast<const sockaddr*>(&command.src_addr),
                              sizeof command.src_addr, source))
      return err;
  }
  if (int err = endpoint_of(reinterpret_cast<const sockaddr*>(&command.dst_addr),
                            sizeof command.dst_addr, destination))
    return err;
  if (!has_id(command.id)) return ENOENT;
  return manager_->resolve_address(command.id, has_source ? &source : nullptr, destination);
}

int CmFile::resolve_addr(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_resolve_addr>(in, in_length);
  if (command.reserved || command.dst_size == 0) return EINVAL;
  cm::IpEndpoint source, destination;
  const bool has_source = command.src_size != 0 && command.src_addr.ss_family != 0;
  if (has_source) {
    if (int err = endpoint_of(reinterpret_cast<const sockaddr*>(&command.src_addr),
                              command.src_size, source))
      return err;
  }
  if (int err = endpoint_of(reinterpret_cast<const sockaddr*>(&command.dst_addr),
                            command.dst_size, destination))
    return err;
  if (!has_id(command.id)) return ENOENT;
  return manager_->resolve_address(command.id, has_source ? &source : nullptr, destination);
}

int CmFile::resolve_route(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_resolve_route>(in, in_length);
  if (!has_id(command.id)) return ENOENT;
  return manager_->resolve_route(command.id);
}

int CmFile::query_route(const uint8_t* in, size_t in_length) {
  const auto command = command_of<rdma_ucm_query>(in, in_length);
  if (!has_id(command.id)) return ENOENT;
  cm::IdAddressing addressing;
  if (int err = manager_->query(command.id, addressing)) return err;
  rdma_ucm_query_route_resp response{};
  response.node_guid = node_guid_of(addressing);
  response.port_num = addressing.has_device ? 1 : 0;
  response.ibdev_index = kNoDeviceIndex;
  write_sockaddr(addressing.source, &response.src_addr, sizeof response.src_addr);
  write_sockaddr(addressing.destination, &response.dst_addr, sizeof response.dst_addr);
  if (addressing.has_path) {
    response.num_paths = 1;
    response.ib_route[0] = user_path_record(addressing.path);
  } else if (addressing.has_device) {
    // No route yet: the GIDs and P_Key of the addresses alone.
    std::memcpy(response.ib_route[0].sgid, addressing.sgid.data(), 16);
    std::memcpy(response.ib_route[0].dgid, addressing.dgid.data(), 16);
    response.ib_route[0].pkey = htobe16(addressing.pkey);
  }
  respond(command.response, response);
  return 0;
}

int CmFile::query(const uint8_t* in, size_t in_length, size_t out_length) {
  const auto command = command_of<rdma_ucm_query>(in, in_length);
  if (command.option > RDMA_USER_CM_QUERY_GID) return ENOSYS;
  if (!has_id(command.id)) return ENOENT;
  cm::IdAddressing addressing;
  if (int err = manager_->query(command.id, addressing)) return err;
  // librdmacm asks for packed path records only on the AF_IB command set,
  // which this file refuses at BIND; QUERY_ROUTE gives the path instead.
  if (command.option == RDMA_USER_CM_QUERY_PATH) return ENOSYS;
  if (out_length < sizeof(rdma_ucm_query_addr_resp)) return ENOSPC;
  rdma_ucm_query_addr_resp response{};
  response.node_guid = node_guid_of(addressing);
  response.port_num = addressing.has_device ? 1 : 0;
  response.ibdev_index = kNoDeviceIndex;
  if (command.option == RDMA_USER_CM_QUERY_ADDR) {
    response.pkey = htobe16(addressing.pkey);
    response.src_size = static_cast<uint16_t>(
        write_sockaddr(addressing.source, &response.src_addr, sizeof response.src_addr));
    response.dst_size = static_cast<uint16_t>(
        write_sockaddr(addressing.destination, &response.dst_addr, sizeof response.dst_addr));
  } else {
    response.src_size = response.dst_size = sizeof(sockaddr_ib);
    write_ib_address(addressing.sgid, addressing.pkey,
                     service_id_of(addressing.port_space, addressing.source.port),
                     &response.src_addr);
    write_ib_address(addressing.dgid, addressing.pkey,
                     service_id_of(addressing.port_space, addressing.destination.port),
                     &response.dst_addr);
  }
  respond(command.response, response);
  return 0;
}

}  // namespace softverbs::provider
