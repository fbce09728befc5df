// The registry's table of connection-manager port bindings: the RDMA CM's
// port spaces, shared by every process of one user as the kernel's are by
// every process of a network namespace.
//
// The table is written by other processes: each entry is read once, into a
// copy, and only the copy is used.
#include <sys/random.h>
#include <time.h>

#include <algorithm>
#include <bitset>
#include <cerrno>
#include <vector>

#include "emulator/wire/shm_registry.h"
#include "emulator/wire/shm_registry_access.h"

namespace softverbs {
namespace {

using CmBinding = ShmRegistry::CmBinding;
using PortSet = std::bitset<UINT16_MAX + 1>;

constexpr uint32_t kEphemeralPorts =
    ShmRegistry::kLastEphemeralCmPort - ShmRegistry::kFirstEphemeralCmPort + 1;

// 0.0.0.0 reaches the table as ::ffff:0.0.0.0 when a caller maps every IPv4
// address alike; it is the any address all the same.
Gid normalized_address(const Gid& address) {
  static constexpr Gid kMappedIpv4Any{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0};
  return address == kMappedIpv4Any ? Gid{} : address;
}

bool is_any_address(const Gid& address) { return address == Gid{}; }

// A copy of one entry, with its owner's slot and generation. false when the
// entry is free, or names a slot that is free (no correct process leaves
// one so, but a broken one may).
bool read_binding(const RegistryLayout& layout, const RegistryCmBinding& entry, CmBinding& out) {
  const uint32_t owner = load_shared(entry.owner);
  if (owner == 0) return false;
  out.slot = owner - 1;
  out.generation = load_shared(layout.slots[out.slot].generation);
  if (out.generation == 0) return false;
  out.pid = load_shared(layout.slots[out.slot].pid);
  for (size_t i = 0; i < out.address.size(); ++i) out.address[i] = load_shared(entry.address[i]);
  out.address = normalized_address(out.address);
  out.agent_qpn = load_shared(entry.agent_qpn);
  out.port_space = load_shared(entry.port_space);
  out.port = load_shared(entry.port);
  out.listening = load_shared(entry.listening) != 0;
  return true;
}

void write_binding(RegistryCmBinding& entry, const CmBinding& binding, uint32_t slot) {
  std::copy(binding.address.begin(), binding.address.end(), entry.address);
  entry.agent_qpn = binding.agent_qpn;
  entry.port_space = binding.port_space;
  entry.port = binding.port;
  entry.listening = 0;
  shared(entry.owner).store(static_cast<uint8_t>(slot + 1));  // last: in use from here on
}

// Whether `held` keeps `wanted` off its port, and with which errno: the
// kernel's cma_check_port (without SO_REUSEADDR, which is not offered).
Errno port_conflict(const CmBinding& held, const CmBinding& wanted) {
  if (held.port_space != wanted.port_space || held.port != wanted.port) return 0;
  if (is_any_address(held.address) || is_any_address(wanted.address)) return EADDRNOTAVAIL;
  return held.address == wanted.address ? EADDRINUSE : 0;
}

// What a bind needs to know of the table, from one pass over it.
struct TableScan {
  uint32_t free_index = kMaxCmBindings;  // kMaxCmBindings: the table is full
  Errno conflict = 0;                    // for an explicit port
  PortSet ports_in_space;                // any binding of the space, any address
};

TableScan scan_for_bind(const RegistryLayout& layout, const CmBinding& wanted) {
  TableScan scan;
  for (uint32_t index = 0; index < kMaxCmBindings; ++index) {
    CmBinding held;
    if (!read_binding(layout, layout.cm_bindings[index], held)) {
      scan.free_index = std::min(scan.free_index, index);
      continue;
    }
    if (held.port_space != wanted.port_space) continue;
    scan.ports_in_space.set(held.port);
    if (scan.conflict == 0 && wanted.port != 0) scan.conflict = port_conflict(held, wanted);
  }
  return scan;
}

// Where the search for an ephemeral port starts: random, so that processes
// binding at once do not all probe the same ports, and a port just released
// is not handed out again at once. getrandom rather than a seeded engine,
// whose state a forked child would share with its parent.
uint16_t random_ephemeral_start() {
  uint32_t value = 0;
  if (getrandom(&value, sizeof(value), GRND_NONBLOCK) != sizeof(value)) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    value = static_cast<uint32_t>(now.tv_nsec);
  }
  return static_cast<uint16_t>(ShmRegistry::kFirstEphemeralCmPort + value % kEphemeralPorts);
}

// The first port of the ephemeral range from `start` upwards, wrapping,
// that no binding of the space uses on any address (as the kernel's
// cma_alloc_any_port takes only ports with no bind list).
bool pick_ephemeral_port(const PortSet& in_use, uint16_t start, uint16_t& port) {
  constexpr uint32_t kFirst = ShmRegistry::kFirstEphemeralCmPort;
  for (uint32_t step = 0; step < kEphemeralPorts; ++step) {
    const uint32_t candidate = kFirst + (start - kFirst + step) % kEphemeralPorts;
    if (!in_use.test(candidate)) {
      port = static_cast<uint16_t>(candidate);
      return true;
    }
  }
  return false;
}

}  // namespace

Errno ShmRegistry::bind_cm_port(uint16_t port_space, const Gid& address, uint16_t& port,
                                uint32_t agent_qpn, uint32_t& handle) {
  if (self_.generation == 0) return EINVAL;
  CmBinding wanted;
  wanted.port_space = port_space;
  wanted.port = port;
  wanted.address = normalized_address(address);
  wanted.agent_qpn = agent_qpn;
  const uint16_t ephemeral_start = port == 0 ? random_ephemeral_start() : 0;
  Lock lock(*this);
  if (lock.error() != 0) return lock.error();
  reclaim_dead_slots_locked();  // a dead process's ports are free again
  const TableScan scan = scan_for_bind(layout(), wanted);
  if (scan.conflict != 0) return scan.conflict;
  if (scan.free_index == kMaxCmBindings) return ENOMEM;
  if (wanted.port == 0 && !pick_ephemeral_port(scan.ports_in_space, ephemeral_start, wanted.port))
    return EADDRNOTAVAIL;
  write_binding(layout().cm_bindings[scan.free_index], wanted, self_.slot);
  port = wanted.port;
  handle = scan.free_index;
  return 0;
}

Errno ShmRegistry::listen_cm_port(uint32_t handle) {
  if (handle >= kMaxCmBindings || self_.generation == 0) return EINVAL;
  Lock lock(*this);
  if (lock.error() != 0) return lock.error();
  RegistryCmBinding& entry = layout().cm_bindings[handle];
  if (load_shared(entry.owner) != self_.slot + 1) return EINVAL;
  shared(entry.listening).store(1);
  return 0;
}

void ShmRegistry::release_cm_port(uint32_t handle) {
  if (handle >= kMaxCmBindings || self_.generation == 0) return;
  Lock lock(*this);
  if (lock.error() != 0) return;
  RegistryCmBinding& entry = layout().cm_bindings[handle];
  if (load_shared(entry.owner) == self_.slot + 1) shared(entry.owner).store(0);
}

bool ShmRegistry::find_cm_listener(uint16_t port_space, uint16_t port, const Gid& address,
                                   CmBinding& out) const {
  const Gid wanted = normalized_address(address);
  std::vector<CmBinding> candidates;  // bound to `wanted` first, then to the any address
  {
    Lock lock(*this);
    if (lock.error() != 0) return false;
    for (const RegistryCmBinding& entry : layout().cm_bindings) {
      CmBinding held;
      if (!read_binding(layout(), entry, held) || !held.listening ||
          held.port_space != port_space || held.port != port) {
        continue;
      }
      if (held.address == wanted) {
        candidates.insert(candidates.begin(), held);
      } else if (is_any_address(held.address)) {
        candidates.push_back(held);
      }
    }
  }
  // Liveness takes syscalls: checked after the registry lock is released. A dead
  // owner's entry stays until its slot is reclaimed, and is passed over.
  for (const CmBinding& candidate : candidates) {
    if (is_alive(ProcessRef{candidate.slot, 0, candidate.generation})) {
      out = candidate;
      return true;
    }
  }
  return false;
}

std::vector<ShmRegistry::CmBinding> ShmRegistry::cm_listeners() const {
  std::vector<CmBinding> listening;
  {
    Lock lock(*this);
    if (lock.error() != 0) return {};
    for (const RegistryCmBinding& entry : layout().cm_bindings) {
      CmBinding held;
      if (read_binding(layout(), entry, held) && held.listening) listening.push_back(held);
    }
  }
  std::erase_if(listening, [&](const CmBinding& b) {
    return !is_alive(ProcessRef{b.slot, 0, b.generation});
  });
  return listening;
}

}  // namespace softverbs
