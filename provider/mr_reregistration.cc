// ibv_rereg_mr on a soft MR. libibverbs checks the input first (failures:
// IBV_REREG_MR_ERR_INPUT, the MR as it was); what the kernel's command
// refuses is IBV_REREG_MR_ERR_CMD. A soft HCA changes nothing when it
// refuses, so after ERR_CMD the MR still works, which the man page allows
// ("shouldn't be used"). The keys stay the same, as mlx5 may keep them.
#include <unistd.h>

#include "provider/soft_context.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

constexpr int kKnownFlags = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
                            IBV_REREG_MR_CHANGE_ACCESS;

// libibverbs' own checks (verbs.c): EINVAL, the MR untouched.
Errno check_input(const SoftMr& mr, int flags, const void* addr, size_t length, int access) {
  if (mr.mr->kind() == MrKind::kNull) return EINVAL;  // not an IBV_MR_TYPE_MR
  if (flags & ~kKnownFlags) return EINVAL;
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!length || !addr)) return EINVAL;
  if (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS)) return EINVAL;
  return 0;
}

// The kernel's (uverbs rereg_mr): no change asked, a DM MR, a PD that is
// not the context's, bad access bits are EINVAL; then the new memory is
// pinned (EFAULT).
Errno run_command(SoftContext& context, SoftMr& mr, int flags, ibv_pd* pd, void* addr,
                  size_t length, int access) {
  if (!flags || mr.mr->kind() != MrKind::kMemory) return EINVAL;
  MrChange change;
  if (flags & IBV_REREG_MR_CHANGE_PD) {
    if (!pd || pd->context != context.ibv()) return EINVAL;
    change.pd = &soft_of<SoftPd>(pd)->protection_domain();
  }
  uint32_t new_access = 0;
  bool on_demand = false;
  if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
    if (Errno err = mr_access_from_ibv(static_cast<unsigned int>(access), new_access)) return err;
    on_demand = access & IBV_ACCESS_ON_DEMAND;
    change.access = &new_access;
    change.on_demand = &on_demand;
  }
  MrInit translation;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    // libibverbs passes the new address as the MR's virtual address.
    translation.addr = reinterpret_cast<uintptr_t>(addr);
    translation.length = length;
    translation.iova = translation.addr;
    change.translation = &translation;
  }
  return context.hca->reregister_mr(*mr.mr, change);
}

}  // namespace

int rereg_soft_mr(SoftContext& context, SoftMr* mr, int flags, ibv_pd* pd, void* addr,
                  size_t length, int access) {
  if (Errno err = check_input(*mr, flags, addr, length, access)) {
    errno = err;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (Errno err = run_command(context, *mr, flags, pd, addr, length, access)) {
    errno = err;
    return IBV_REREG_MR_ERR_CMD;
  }
  // What libibverbs updates after a successful command.
  if (flags & IBV_REREG_MR_CHANGE_PD) mr->ibv.pd = pd;
  if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
    mr->ibv.addr = addr;
    mr->ibv.length = length;
  }
  return 0;
}

}  // namespace softverbs::provider
