// MADs that another host sends to QP1 (the general services QP) of this host:
// on an HCA the port's QP1 takes them; here each process's connection
// manager has a UD QP of its own, so the one a MAD is for is chosen by its
// contents (a connection request by its service ID: the listener's). The
// connection manager installs the rule, which knows its MADs; without it,
// QP1 traffic from other hosts is dropped and counted.
#pragma once

#include <cstdint>
#include <span>

#include "emulator/host/cm_port_directory.h"
#include "emulator/types.h"

namespace softverbs {

inline constexpr uint32_t kGsiQpn = 1;

// Finds the QP of this host that `mad`, sent to QP1 at `destination`, is
// for. False when no QP takes it.
using GsiRouter = bool (*)(std::span<const uint8_t> mad, const Gid& destination,
                           CmPortDirectory& ports, uint32_t& qpn);

void install_gsi_router(GsiRouter router);
GsiRouter installed_gsi_router();

}  // namespace softverbs
