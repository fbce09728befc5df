#include "emulator/host/cm_port_directory.h"

#include <algorithm>
#include <cerrno>

namespace softverbs {

bool is_any_address(const Gid& address) {
  return std::all_of(address.begin(), address.end(), [](uint8_t b) { return b == 0; });
}

bool LocalCmPortDirectory::port_taken(uint16_t port_space, const Gid& address,
                                      uint16_t port) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) {
    const CmPortBinding& b = e.binding;
    return b.port_space == port_space && b.port == port &&
           (b.address == address || is_any_address(b.address) || is_any_address(address));
  });
}

Errno LocalCmPortDirectory::bind(uint16_t port_space, const Gid& address, uint16_t& port,
                                 uint32_t agent_qpn, uint32_t& handle) {
  std::lock_guard lock(mutex_);
  if (port == 0) {
    constexpr uint32_t kRange = kLastEphemeralCmPort - kFirstEphemeralCmPort + 1;
    for (uint32_t tried = 0; tried < kRange && port == 0; ++tried) {
      const auto candidate = static_cast<uint16_t>(kFirstEphemeralCmPort + next_ephemeral_);
      next_ephemeral_ = (next_ephemeral_ + 1) % kRange;
      if (!port_taken(port_space, address, candidate)) port = candidate;
    }
    if (port == 0) return EADDRNOTAVAIL;
  } else if (port_taken(port_space, address, port)) {
    // As the kernel: a clash with (or as) the any address is "not available".
    const bool any_involved = is_any_address(address) ||
        std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) {
          return e.binding.port_space == port_space && e.binding.port == port &&
                 is_any_address(e.binding.address);
        });
    return any_involved ? EADDRNOTAVAIL : EADDRINUSE;
  }
  handle = next_handle_++;
  entries_.push_back(Entry{handle, CmPortBinding{port_space, port, address, agent_qpn, false}});
  return 0;
}

Errno LocalCmPortDirectory::listen(uint32_t handle) {
  std::lock_guard lock(mutex_);
  for (Entry& e : entries_)
    if (e.handle == handle) {
      e.binding.listening = true;
      return 0;
    }
  return EINVAL;
}

void LocalCmPortDirectory::release(uint32_t handle) {
  std::lock_guard lock(mutex_);
  std::erase_if(entries_, [&](const Entry& e) { return e.handle == handle; });
}

bool LocalCmPortDirectory::find_listener(uint16_t port_space, uint16_t port, const Gid& address,
                                         CmPortBinding& out) {
  std::lock_guard lock(mutex_);
  const Entry* wildcard = nullptr;
  for (const Entry& e : entries_) {
    const CmPortBinding& b = e.binding;
    if (!b.listening || b.port_space != port_space || b.port != port) continue;
    if (b.address == address) {
      out = b;
      return true;
    }
    if (is_any_address(b.address)) wildcard = &e;
  }
  if (!wildcard) return false;
  out = wildcard->binding;
  return true;
}

bool LocalCmPortDirectory::any_listening_agent(uint32_t& agent_qpn) {
  std::lock_guard lock(mutex_);
  for (const Entry& e : entries_) {
    if (!e.binding.listening) continue;
    agent_qpn = e.binding.agent_qpn;
    return true;
  }
  return false;
}

}  // namespace softverbs
