// Who holds which port of the connection manager's port spaces (the RDMA
// CM's TCP, UDP, IB and IPoIB spaces), for every process of the host: a
// bind must not take a port another process holds, and a connection request
// must find the process that listens on its destination port. One directory
// serves every soft device, as one IP stack serves every interface.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "emulator/types.h"

namespace softverbs {

struct CmPortBinding {
  uint16_t port_space = 0;  // RDMA_PS_* value
  uint16_t port = 0;        // host byte order
  Gid address{};            // IPv6 or IPv4-mapped; all zero: any address
  uint32_t agent_qpn = 0;   // where the holder's CM agent receives
  bool listening = false;
};

class CmPortDirectory {
 public:
  virtual ~CmPortDirectory() = default;
  // Reserves (port_space, port, address) under a handle that is never 0;
  // port 0 picks a free ephemeral port and writes it back. EADDRINUSE when
  // the port is held on the same address, EADDRNOTAVAIL when it is held
  // and either address is the any address, or no ephemeral port is free;
  // ENOMEM when full.
  virtual Errno bind(uint16_t port_space, const Gid& address, uint16_t& port,
                     uint32_t agent_qpn, uint32_t& handle) = 0;
  // EINVAL for a handle not ours.
  virtual Errno listen(uint32_t handle) = 0;
  virtual void release(uint32_t handle) = 0;
  // The listener a connection to (space, port, address) reaches: one bound
  // to that very address before one bound to the any address.
  virtual bool find_listener(uint16_t port_space, uint16_t port, const Gid& address,
                             CmPortBinding& out) = 0;
  // The agent of some process that listens on any port: one that can refuse
  // a request for a port nobody listens on. False when nobody listens.
  virtual bool any_listening_agent(uint32_t& agent_qpn) = 0;
};

// Bindings of this process only (unit tests, the loopback wire).
class LocalCmPortDirectory final : public CmPortDirectory {
 public:
  Errno bind(uint16_t port_space, const Gid& address, uint16_t& port, uint32_t agent_qpn,
             uint32_t& handle) override;
  Errno listen(uint32_t handle) override;
  void release(uint32_t handle) override;
  bool find_listener(uint16_t port_space, uint16_t port, const Gid& address,
                     CmPortBinding& out) override;
  bool any_listening_agent(uint32_t& agent_qpn) override;

 private:
  struct Entry {
    uint32_t handle;
    CmPortBinding binding;
  };
  bool port_taken(uint16_t port_space, const Gid& address, uint16_t port) const;
  std::mutex mutex_;
  uint32_t next_handle_ = 1;
  uint32_t next_ephemeral_ = 0;
  std::vector<Entry> entries_;
};

// Ports handed out when a bind asks for none: the kernel's default
// ip_local_port_range.
inline constexpr uint16_t kFirstEphemeralCmPort = 32768;
inline constexpr uint16_t kLastEphemeralCmPort = 60999;

bool is_any_address(const Gid& address);

}  // namespace softverbs
