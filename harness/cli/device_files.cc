#include "harness/cli/device_files.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "harness/cli/private_mounts.h"
#include "harness/cli/tmpfs_cover.h"
#include "provider/sysfs_files.h"

namespace softverbs::cli {
namespace {

constexpr const char* kSysClass = "/sys/class";
constexpr const char* kDev = "/dev";

std::string describe(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// A kernel device in /sys/class/infiniband is a symbolic link into
// /sys/devices; anything else there was made by an outer `softverbs run`.
bool not_a_kernel_device(std::string_view, mode_t type) { return type != S_IFLNK; }

// The kernel's nodes are uverbsN; "uverbs_<dev>" are soft devices' nodes.
bool soft_device_node(std::string_view name, mode_t) { return name.starts_with("uverbs_"); }

// mkdir -p of the directories of `path` below `root`.
bool make_parents(const std::string& root, const std::string& relative) {
  for (size_t slash = relative.find('/'); slash != std::string::npos;
       slash = relative.find('/', slash + 1)) {
    const std::string dir = root + "/" + relative.substr(0, slash);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

bool write_file(const std::string& path, const std::string& content) {
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444);
  if (fd < 0) return false;
  const bool written =
      ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ::close(fd);
  return written;
}

// device/net/<if> for each net device holding the device's addresses, a
// link to the interface's own sysfs directory as on a kernel device, where
// a test suite (rdma-core's) finds the address to reach the device by.
// None for a device that holds no interface (the kernel has no device/net
// on a device without a net device either).
std::string write_net_device_links(const std::string& root, const DeviceDescription& device) {
  if (device.net_devices.empty()) return {};
  for (const char* dir : {"/device", "/device/net"}) {
    if (::mkdir((root + dir).c_str(), 0755) != 0) return describe("making " + root + dir);
  }
  for (const std::string& name : device.net_devices) {
    const std::string link = root + "/device/net/" + name;
    if (::symlink(("/sys/class/net/" + name).c_str(), link.c_str()) != 0)
      return describe("linking " + link);
  }
  return {};
}

std::string write_sysfs_tree(const DeviceDescription& device) {
  const std::string root = std::string(kSysClass) + "/infiniband/" + device.name;
  if (::mkdir(root.c_str(), 0755) != 0) return describe("making " + root);
  for (const std::string& name : provider::ibdev_sysfs_file_names(device)) {
    std::string content;
    provider::ibdev_sysfs_file(device, name, content);
    if (!make_parents(root, name) || !write_file(root + "/" + name, content))
      return describe("writing " + root + "/" + name);
  }
  return write_net_device_links(root, device);
}

// UCX wants a character device it may read and write; /dev/null's node is
// one, and does nothing if anything opens it.
std::string make_device_node(const DeviceDescription& device) {
  const std::string node = std::string(kDev) + "/infiniband/" + provider::uverbs_name(device);
  const int fd = ::open(node.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return describe("making " + node);
  ::close(fd);
  if (::mount("/dev/null", node.c_str(), nullptr, MS_BIND, nullptr) != 0)
    return describe("bind-mounting /dev/null on " + node);
  return {};
}

std::string fill_covers(const std::vector<DeviceDescription>& devices) {
  if (std::string problem = cover_with_tmpfs(kSysClass, "infiniband", not_a_kernel_device);
      !problem.empty())
    return problem;
  std::string problem = cover_with_tmpfs(kDev, "infiniband", soft_device_node);
  if (!problem.empty()) {
    ::umount2(kSysClass, MNT_DETACH);
    return problem;
  }
  for (const DeviceDescription& device : devices) {
    if (problem.empty()) problem = write_sysfs_tree(device);
    if (problem.empty()) problem = make_device_node(device);
  }
  if (problem.empty()) problem = seal_cover(kSysClass);
  if (problem.empty()) problem = seal_cover(kDev);
  if (!problem.empty()) {
    ::umount2(kDev, MNT_DETACH);
    ::umount2(kSysClass, MNT_DETACH);
  }
  return problem;
}

}  // namespace

DeviceFilesOutcome make_device_files(const std::vector<DeviceDescription>& devices,
                                     bool allow_user_namespace) {
  DeviceFilesOutcome outcome;
  if (devices.empty()) return outcome;
  const MountNamespaceOutcome ns = enter_private_mount_namespace(allow_user_namespace);
  if (!ns.entered) {
    outcome.broken = ns.broken;
    outcome.problem = ns.problem;
    return outcome;
  }
  outcome.problem = fill_covers(devices);
  outcome.made = outcome.problem.empty();
  return outcome;
}

}  // namespace softverbs::cli
