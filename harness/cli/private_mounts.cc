#include "harness/cli/private_mounts.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace softverbs::cli {
namespace {

std::string describe(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

bool write_proc_file(const char* path, const std::string& text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return written;
}

std::string map_own_ids(uid_t uid, gid_t gid) {
  // Without "deny" an unprivileged process may not write gid_map. The file
  // does not exist on kernels before 3.19, which did not require it.
  if (!write_proc_file("/proc/self/setgroups", "deny") && errno != ENOENT)
    return describe("writing /proc/self/setgroups");
  if (!write_proc_file("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1"))
    return describe("writing /proc/self/uid_map");
  if (!write_proc_file("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
    return describe("writing /proc/self/gid_map");
  return {};
}

}  // namespace

MountNamespaceOutcome enter_private_mount_namespace(bool allow_user_namespace) {
  MountNamespaceOutcome outcome;
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWNS) != 0) {
    if (errno != EPERM || !allow_user_namespace) {
      outcome.problem = describe("unshare(CLONE_NEWNS)");
      return outcome;
    }
    // Not privileged: a user namespace gives the capability to mount, in
    // this mount namespace only.
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      outcome.problem = describe("unshare(CLONE_NEWUSER | CLONE_NEWNS)");
      return outcome;
    }
    outcome.problem = map_own_ids(uid, gid);
    if (!outcome.problem.empty()) {
      outcome.broken = true;
      return outcome;
    }
  }
  // Mounts made from now on stay in this namespace.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
    outcome.problem = describe("making / a slave mount");
    return outcome;
  }
  outcome.entered = true;
  return outcome;
}

}  // namespace softverbs::cli
