// Opening the device under test and learning how its port 1 is addressed.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "harness/testsupport/errors.h"
#include "harness/testsupport/verbs_handles.h"

namespace softverbs::testsupport {

// Opens the device called `name`. ENODEV when no listed device has that
// name, otherwise the errno of ibv_get_device_list / ibv_open_device.
ContextPtr open_device(const std::string& name, Errno& err);

// Opens the device chosen by test_config().
ContextPtr open_test_device(Errno& err);

// How peers reach a port: by LID on an InfiniBand port with a LID assigned,
// otherwise through a GRH carrying the GID at `gid_index`.
struct PortAddress {
  uint8_t port = 1;
  uint16_t lid = 0;
  ibv_gid gid{};
  uint8_t gid_index = 0;
  bool use_grh = false;
  ibv_mtu active_mtu = IBV_MTU_1024;
  uint8_t link_layer = IBV_LINK_LAYER_UNSPECIFIED;
  // Another InfiniBand port of the device, for an alternate path (APM);
  // 0 when the device has none.
  uint8_t alt_port = 0;
  uint16_t alt_lid = 0;
};

Errno query_port_address(ibv_context* context, uint8_t port, int gid_index,
                         PortAddress& out);

// The same for the port and GID index of test_config().
Errno query_test_port_address(ibv_context* context, PortAddress& out);

}  // namespace softverbs::testsupport
