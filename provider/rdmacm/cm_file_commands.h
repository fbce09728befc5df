// What the rdma_cm file's commands share: reading a command, writing a
// response into librdmacm's memory, and translating between the kernel
// ABI's sockaddrs, path records and events and the connection manager's
// values.
#pragma once

#include <infiniband/ib.h>
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "emulator/cm/cm_types.h"

namespace softverbs::provider {

// The command struct `T` from the bytes after the header; like the kernel,
// a short command is zero-filled rather than refused.
template <typename T>
T command_of(const uint8_t* in, size_t in_length) {
  T command{};
  std::memcpy(&command, in, std::min(in_length, sizeof command));
  return command;
}

// Writes a response where librdmacm said (a pointer into its own memory).
template <typename T>
void respond(uint64_t address, const T& response) {
  std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(address)), &response,
              sizeof response);
}

// An AF_INET or AF_INET6 sockaddr of at most `length` bytes. EAFNOSUPPORT
// for AF_IB (librdmacm then speaks the IP-only commands), EINVAL otherwise.
int endpoint_of(const sockaddr* address, size_t length, cm::IpEndpoint& out);
// Its sockaddr (sockaddr_in or sockaddr_in6) in `out`; returns its size.
size_t write_sockaddr(const cm::IpEndpoint& endpoint, void* out, size_t room);

// The kernel ABI's path record (struct ib_user_path_rec).
ib_user_path_rec user_path_record(const cm::PathRecord& path);

// The kernel ABI's address handle attributes.
ib_uverbs_ah_attr user_ah_attr(const AddressVector& av);

// The bytes GET_EVENT returns for `event` (struct rdma_ucm_event_resp),
// told as being for the file's id (or multicast handle) `id`.
std::vector<uint8_t> event_response(const cm::Event& event, uint64_t uid, uint32_t id);

}  // namespace softverbs::provider
