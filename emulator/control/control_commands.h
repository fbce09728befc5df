// The requests a process answers on its control socket, and their replies.
//   stats                       counters of the engine, wire, faults, devices, QPs
//   fault show|clear            the fault plan in force
//   fault set SPEC              replace the fault plan (see docs/faults.md)
//   port DEVICE up|down         take a device's port down or up (PORT_ERR/ACTIVE)
//   rnr off|all|QPN             force RNR NAKs for SENDs (all QPs or one)
//   capture start ... FILE|stop a packet capture (capture_requests.h)
// Replies are text; a failed request's reply starts with "error: ".
#pragma once

#include <string>
#include <string_view>

namespace softverbs {
class Engine;
namespace control {

// Any thread; takes the locks it needs.
std::string handle_request(Engine& engine, std::string_view request);

}  // namespace control
}  // namespace softverbs
