// The files a kernel RDMA device has outside libibverbs, made for the soft
// devices in the program's own view of the file system: what tools that
// look at the OS for a device (UCX's `ucx_info -d`, libibumad, scripts that
// read /sys/class/infiniband/<dev>/ports/1/gids/0) need to find them.
//
//   /sys/class/infiniband/<dev>/...    node_guid, node_type, board_id,
//                                      ports/1/{state,lid,rate,gids/N,...}
//   /dev/infiniband/uverbs_<dev>       a character device (/dev/null's node):
//                                      UCX skips devices without one there
//
// Made in a private mount namespace (inside a user namespace when not
// privileged), by covering /sys/class and /dev with tmpfs mounts that put
// every original entry back; other processes see nothing of it.
#pragma once

#include <string>
#include <vector>

#include "emulator/host/device_config.h"

namespace softverbs::cli {

struct DeviceFilesOutcome {
  bool made = false;
  bool broken = false;  // the process can no longer run a program
  std::string problem;  // why not made
};

// Must run in the single-threaded CLI just before it executes the program.
// `allow_user_namespace`: see enter_private_mount_namespace for its price.
DeviceFilesOutcome make_device_files(const std::vector<DeviceDescription>& devices,
                                     bool allow_user_namespace);

}  // namespace softverbs::cli
