// Device memory (ibv_alloc_dm(3)) on a soft device: the ops of
// verbs_context behind ibv_alloc_dm, ibv_free_dm and ibv_reg_dm_mr, and the
// copy functions of each ibv_dm. Where the man page leaves room, mlx5's
// rules: a length above max_dm_size or a comp_mask is EINVAL, access bits
// beyond the remote ones and ZERO_BASED are EINVAL, copies are of 32-bit
// words (EINVAL otherwise) inside the DM (EFAULT otherwise).
#include <atomic>

#include "provider/exports.h"
#include "provider/soft_context.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

constexpr unsigned int kDmMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                     IBV_ACCESS_ZERO_BASED | IBV_ACCESS_OPTIONAL_RANGE;

std::atomic<uint32_t> g_next_dm_handle{1};

int copy_to_dm(ibv_dm* dm, uint64_t offset, const void* host, size_t length) {
  return soft_of<SoftDm>(dm)->dm->copy_in(offset, host, length);
}

int copy_from_dm(void* host, ibv_dm* dm, uint64_t offset, size_t length) {
  return soft_of<SoftDm>(dm)->dm->copy_out(host, offset, length);
}

ibv_dm* soft_alloc_dm(ibv_context* context, ibv_alloc_dm_attr* attr) {
  SoftContext* soft = soft_context(context);
  if (!soft || !attr || attr->comp_mask) {
    errno = EINVAL;
    return nullptr;
  }
  return errno_on_exception(
      [&]() -> ibv_dm* {
        std::unique_ptr<SoftDm> dm(new SoftDm{});
        Errno err = 0;
        dm->dm = soft->hca->alloc_device_memory(attr->length, attr->log_align_req, err);
        if (!dm->dm) {
          errno = err ? err : ENOMEM;
          return nullptr;
        }
        dm->ibv.context = context;
        dm->ibv.memcpy_to_dm = copy_to_dm;
        dm->ibv.memcpy_from_dm = copy_from_dm;
        dm->ibv.handle = g_next_dm_handle.fetch_add(1);
        std::lock_guard lock(soft->objects.mutex);
        soft->objects.dms.insert(dm.get());
        return &dm.release()->ibv;
      },
      static_cast<ibv_dm*>(nullptr));
}

int soft_free_dm(ibv_dm* dm) {
  SoftContext* context = dm ? soft_context(dm->context) : nullptr;
  if (!context) return EINVAL;
  SoftDm* soft = soft_of<SoftDm>(dm);
  if (soft->dm->users.load() != 0) return EBUSY;  // an MR is registered on it
  destroy_soft_dm(*context, soft);
  return 0;
}

ibv_mr* soft_reg_dm_mr(ibv_pd* pd, ibv_dm* dm, uint64_t offset, size_t length,
                       unsigned int ibv_access) {
  SoftContext* context = pd ? soft_context(pd->context) : nullptr;
  uint32_t access = 0;
  // DM MRs are zero-based (libibverbs' rule), and only take these rights.
  if (!context || !dm || dm->context != pd->context || !(ibv_access & IBV_ACCESS_ZERO_BASED) ||
      (ibv_access & ~kDmMrAccess) || mr_access_from_ibv(ibv_access, access)) {
    errno = EINVAL;
    return nullptr;
  }
  return errno_on_exception(
      [&]() -> ibv_mr* {
        std::unique_ptr<SoftMr> mr(new SoftMr{});
        Errno err = 0;
        mr->mr = context->hca->register_device_memory_mr(soft_of<SoftPd>(pd)->protection_domain(),
                                                         *soft_of<SoftDm>(dm)->dm, offset,
                                                         length, access, err);
        if (!mr->mr) {
          errno = err ? err : ENOMEM;
          return nullptr;
        }
        return publish_soft_mr(*context, std::move(mr), pd, nullptr, length);
      },
      static_cast<ibv_mr*>(nullptr));
}

}  // namespace

void destroy_soft_dm(SoftContext& context, SoftDm* dm) {
  {
    std::lock_guard lock(context.objects.mutex);
    context.objects.dms.erase(dm);
  }
  delete dm;
}

void set_device_memory_ops(verbs_context& vctx) {
  vctx.alloc_dm = soft_alloc_dm;
  vctx.free_dm = soft_free_dm;
  vctx.reg_dm_mr = soft_reg_dm_mr;
}

}  // namespace softverbs::provider
