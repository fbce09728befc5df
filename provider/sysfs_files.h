// The sysfs files a kernel RDMA device would have, for soft devices: what
// programs (ibv_devinfo reads board_id) find through ibv_read_sysfs_file
// under a soft device's ibdev_path and dev_path, where nothing exists.
#pragma once

#include <infiniband/verbs.h>

#include <string>
#include <string_view>
#include <vector>

#include "emulator/host/device_config.h"
#include "emulator/types.h"

namespace softverbs::provider {

// The text of `file` (e.g. "board_id", "ports/1/lid") below the device's
// ibdev_path, with the kernel's trailing newline. ENOENT when no such file;
// EINVAL where the kernel's read fails that way (GID types on InfiniBand).
Errno ibdev_sysfs_file(const DeviceDescription& device, std::string_view file,
                       std::string& content);

// Every file ibdev_sysfs_file serves for the device, relative to its
// ibdev_path ("node_guid", "ports/1/gids/0", ...), in a stable order; the
// files whose read fails (GID types on InfiniBand) are left out.
std::vector<std::string> ibdev_sysfs_file_names(const DeviceDescription& device);

// The same below the device's uverbs class directory (dev_path).
Errno uverbs_sysfs_file(const DeviceDescription& device, std::string_view file,
                        std::string& content);

// The device's uverbs name ("uverbs_softverbs0"): ibv_device.dev_name, the
// last part of its dev_path, and its node under /dev/infiniband.
std::string uverbs_name(const DeviceDescription& device);

// The GUID as sysfs writes it: four groups of four hex digits.
std::string sysfs_guid(uint64_t guid);

// ibv_read_sysfs_file's result for a file with `content`: copies it into
// buf without the trailing newline, NUL-terminated; returns the length, or
// -1 when it does not fit.
int copy_sysfs_content(const std::string& content, char* buf, size_t size);

}  // namespace softverbs::provider
