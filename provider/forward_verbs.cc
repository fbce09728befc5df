// Functions that touch no device object: always the real library's.
#include "provider/exports.h"
#include "provider/real_library.h"

#include <unistd.h>

#include <cstring>
#include <string>

namespace {

// Whether `fd` is an eventfd: the link of /proc/self/fd/<fd> names the kind
// of an anonymous file, and stays the same through dup() and SCM_RIGHTS.
bool is_eventfd(int fd) {
  if (fd < 0) return false;
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  char target[64];
  const ssize_t length = ::readlink(path.c_str(), target, sizeof(target) - 1);
  if (length < 0) return false;
  target[length] = '\0';
  return std::strcmp(target, "anon_inode:[eventfd]") == 0;
}

}  // namespace

SOFTVERBS_EXPORT const char* ibv_get_sysfs_path(void) {
  SOFTVERBS_FORWARD("/sys", ibv_get_sysfs_path);
}

SOFTVERBS_EXPORT int ibv_dontfork_range(void* base, size_t size) {
  SOFTVERBS_FORWARD(ENOSYS, ibv_dontfork_range, base, size);
}

SOFTVERBS_EXPORT int ibv_dofork_range(void* base, size_t size) {
  SOFTVERBS_FORWARD(ENOSYS, ibv_dofork_range, base, size);
}

// A soft context's cmd_fd is an eventfd (a uverbs command fd never is):
// such a context cannot be shared. Everything else is the kernel's to judge.
SOFTVERBS_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
  if (is_eventfd(cmd_fd)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  SOFTVERBS_FORWARD(nullptr, ibv_import_device, cmd_fd);
}

SOFTVERBS_EXPORT const char* ibv_node_type_str(ibv_node_type node_type) {
  SOFTVERBS_FORWARD("unknown", ibv_node_type_str, node_type);
}

SOFTVERBS_EXPORT const char* ibv_port_state_str(ibv_port_state port_state) {
  SOFTVERBS_FORWARD("unknown", ibv_port_state_str, port_state);
}

SOFTVERBS_EXPORT const char* ibv_event_type_str(ibv_event_type event) {
  SOFTVERBS_FORWARD("unknown", ibv_event_type_str, event);
}

SOFTVERBS_EXPORT const char* ibv_wc_status_str(ibv_wc_status status) {
  SOFTVERBS_FORWARD("unknown", ibv_wc_status_str, status);
}

SOFTVERBS_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
  SOFTVERBS_FORWARD(-1, ibv_rate_to_mult, rate);
}

SOFTVERBS_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
  SOFTVERBS_FORWARD(IBV_RATE_MAX, mult_to_ibv_rate, mult);
}

SOFTVERBS_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
  SOFTVERBS_FORWARD(-1, ibv_rate_to_mbps, rate);
}

SOFTVERBS_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
  SOFTVERBS_FORWARD(IBV_RATE_MAX, mbps_to_ibv_rate, mbps);
}

SOFTVERBS_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
  SOFTVERBS_FORWARD_VOID(ibv_copy_qp_attr_from_kern, dst, src);
}

SOFTVERBS_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) {
  SOFTVERBS_FORWARD_VOID(ibv_copy_ah_attr_from_kern, dst, src);
}

SOFTVERBS_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
  SOFTVERBS_FORWARD_VOID(ibv_copy_path_rec_from_kern, dst, src);
}

SOFTVERBS_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
  SOFTVERBS_FORWARD_VOID(ibv_copy_path_rec_to_kern, dst, src);
}
