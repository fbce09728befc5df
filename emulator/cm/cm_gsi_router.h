// The connection manager's rule for MADs that another host sends to this
// host's QP1 (gsi_routing.h): a connection request (REQ or SIDR REQ) goes to
// the agent of the process that listens on its service ID's port at the
// address it was sent to; a request for a port nobody listens on goes to
// some listening process's agent, which refuses it as a CM does (REJ or
// SIDR REP with "invalid service ID"). Anything else sent to QP1 is not
// taken: replies travel between the agents' own QPs.
#pragma once

#include <cstdint>
#include <span>

#include "emulator/host/cm_port_directory.h"
#include "emulator/types.h"

namespace softverbs::cm {

bool route_request_to_agent(std::span<const uint8_t> mad, const Gid& destination,
                            CmPortDirectory& ports, uint32_t& agent_qpn);

}  // namespace softverbs::cm
