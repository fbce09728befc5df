// Protection domains and memory regions.
#include <unistd.h>

#include <cstdint>
#include <new>

#include "provider/exports.h"
#include "provider/real_library.h"
#include "provider/soft_context.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

// ibv_reg_mr(3)'s layout bits: the MR's address space starts at `iova`
// (0 when zero-based); an implicit on-demand MR (addr NULL, length
// SIZE_MAX) spans the whole address space. An explicit iova keeps the page
// offset of addr, as the kernel requires (EINVAL).
Errno mr_init_from_ibv(void* addr, size_t length, uint64_t iova, unsigned int ibv_access,
                       MrInit& init) {
  if (Errno err = mr_access_from_ibv(ibv_access, init.access)) return err;
  init.addr = reinterpret_cast<uintptr_t>(addr);
  init.length = length;
  init.on_demand = ibv_access & IBV_ACCESS_ON_DEMAND;
  const bool implicit = init.on_demand && !addr && length == SIZE_MAX;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (!implicit && !(ibv_access & IBV_ACCESS_ZERO_BASED) && ((init.addr ^ iova) & (page - 1)))
    return EINVAL;
  init.iova = (implicit || (ibv_access & IBV_ACCESS_ZERO_BASED)) ? 0 : iova;
  return 0;
}

ibv_mr* register_soft_mr(SoftContext& context, ibv_pd* pd, void* addr, size_t length,
                         uint64_t iova, unsigned int ibv_access) {
  MrInit init;
  if (Errno err = mr_init_from_ibv(addr, length, iova, ibv_access, init)) {
    errno = err;
    return nullptr;
  }
  return errno_on_exception(
      [&]() -> ibv_mr* {
        std::unique_ptr<SoftMr> mr(new SoftMr{});
        Errno err = 0;
        mr->mr = context.hca->register_mr(soft_of<SoftPd>(pd)->protection_domain(), init, err);
        if (!mr->mr) {
          errno = err ? err : ENOMEM;
          return nullptr;
        }
        return publish_soft_mr(context, std::move(mr), pd, addr, length);
      },
      static_cast<ibv_mr*>(nullptr));
}

// ibv_alloc_null_mr(3): as mlx5's, addr NULL and length SIZE_MAX, an lkey
// and no rkey.
ibv_mr* soft_alloc_null_mr(ibv_pd* pd) {
  SoftContext* context = pd ? soft_context(pd->context) : nullptr;
  if (!context) {
    errno = EINVAL;
    return nullptr;
  }
  return errno_on_exception(
      [&]() -> ibv_mr* {
        std::unique_ptr<SoftMr> mr(new SoftMr{});
        Errno err = 0;
        mr->mr = context->hca->register_null_mr(soft_of<SoftPd>(pd)->protection_domain(), err);
        if (!mr->mr) {
          errno = err ? err : ENOMEM;
          return nullptr;
        }
        return publish_soft_mr(*context, std::move(mr), pd, nullptr, SIZE_MAX);
      },
      static_cast<ibv_mr*>(nullptr));
}

ibv_mr* register_mr(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                    unsigned int access) {
  SoftContext* context = soft_context(pd->context);
  return register_soft_mr(*context, pd, addr, length, iova, access);
}

}  // namespace

ibv_mr* publish_soft_mr(SoftContext& context, std::unique_ptr<SoftMr> mr, ibv_pd* pd, void* addr,
                        size_t length) {
  ibv_mr& ibv = mr->ibv;
  ibv.context = context.ibv();
  ibv.pd = pd;
  ibv.addr = addr;
  ibv.length = length;
  ibv.handle = mr->mr->lkey();
  ibv.lkey = mr->mr->lkey();
  ibv.rkey = mr->mr->rkey();
  std::lock_guard lock(context.objects.mutex);
  context.objects.mrs.insert(mr.get());
  return &mr.release()->ibv;
}

void set_memory_ops(verbs_context& vctx) {
  vctx.alloc_null_mr = soft_alloc_null_mr;
  set_advise_mr_op(vctx);
  set_device_memory_ops(vctx);
}

void destroy_soft_mr(SoftContext& context, SoftMr* mr) {
  {
    std::lock_guard lock(context.objects.mutex);
    context.objects.mrs.erase(mr);
  }
  delete mr;
}

void destroy_soft_pd(SoftContext& context, SoftPd* pd) {
  {
    std::lock_guard lock(context.objects.mutex);
    context.objects.pds.erase(pd);
  }
  if (pd->is_parent_domain()) release_parent_domain(*pd);
  delete pd;
}

}  // namespace softverbs::provider

using namespace softverbs;
using namespace softverbs::provider;

SOFTVERBS_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  if (!context) {
    errno = EINVAL;
    return nullptr;
  }
  SoftContext* soft = soft_context(context);
  if (!soft) SOFTVERBS_FORWARD(nullptr, ibv_alloc_pd, context);
  return errno_on_exception(
      [&]() -> ibv_pd* {
        std::unique_ptr<SoftPd> pd(new SoftPd{});
        Errno err = 0;
        pd->pd = soft->hca->alloc_pd(err);
        if (!pd->pd) {
          errno = err ? err : ENOMEM;
          return nullptr;
        }
        pd->ibv.context = context;
        pd->ibv.handle = pd->pd->handle();
        std::lock_guard lock(soft->objects.mutex);
        soft->objects.pds.insert(pd.get());
        return &pd.release()->ibv;
      },
      static_cast<ibv_pd*>(nullptr));
}

SOFTVERBS_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  if (!pd) return EINVAL;
  SoftContext* context = soft_context(pd->context);
  if (!context) SOFTVERBS_FORWARD(ENOSYS, ibv_dealloc_pd, pd);
  SoftPd* soft = soft_of<SoftPd>(pd);
  if (soft->is_parent_domain()) return dealloc_parent_domain(*context, soft);
  // MRs, QPs and parent domains still on it: ibv_dealloc_pd(3) fails and
  // the PD stays.
  if (soft->pd->users.load() != 0) return EBUSY;
  destroy_soft_pd(*context, soft);
  return 0;
}

SOFTVERBS_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  if (!pd) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_soft(pd->context)) SOFTVERBS_FORWARD(nullptr, ibv_reg_mr, pd, addr, length, access);
  return register_mr(pd, addr, length, reinterpret_cast<uintptr_t>(addr),
                     static_cast<unsigned int>(access));
}

SOFTVERBS_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length,
                                         uint64_t iova, int access) {
  if (!pd) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_soft(pd->context))
    SOFTVERBS_FORWARD(nullptr, ibv_reg_mr_iova, pd, addr, length, iova, access);
  return register_mr(pd, addr, length, iova, static_cast<unsigned int>(access));
}

SOFTVERBS_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length,
                                          uint64_t iova, unsigned int access) {
  if (!pd) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_soft(pd->context))
    SOFTVERBS_FORWARD(nullptr, ibv_reg_mr_iova2, pd, addr, length, iova, access);
  return register_mr(pd, addr, length, iova, access);
}

SOFTVERBS_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length,
                                           uint64_t iova, int fd, int access) {
  if (!pd) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_soft(pd->context))
    SOFTVERBS_FORWARD(nullptr, ibv_reg_dmabuf_mr, pd, offset, length, iova, fd, access);
  errno = EOPNOTSUPP;  // a soft HCA imports no dma-buf (no device shares its pages)
  return nullptr;
}

SOFTVERBS_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  if (!mr) return EINVAL;
  SoftContext* context = soft_context(mr->context);
  if (!context) SOFTVERBS_FORWARD(ENOSYS, ibv_dereg_mr, mr);
  destroy_soft_mr(*context, soft_of<SoftMr>(mr));
  return 0;
}

SOFTVERBS_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr,
                                  size_t length, int access) {
  if (!mr) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if (!is_soft(mr->context))
    SOFTVERBS_FORWARD(IBV_REREG_MR_ERR_INPUT, ibv_rereg_mr, mr, flags, pd, addr, length,
                      access);
  return rereg_soft_mr(*soft_context(mr->context), soft_of<SoftMr>(mr), flags, pd, addr, length,
                       access);
}

SOFTVERBS_EXPORT ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
  if (!context) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_soft(context)) SOFTVERBS_FORWARD(nullptr, ibv_import_pd, context, pd_handle);
  errno = EOPNOTSUPP;  // soft objects cannot be shared between processes
  return nullptr;
}

// A soft object can never have been imported: the unimport verbs leave it
// alone, and say so in errno (they return nothing).
SOFTVERBS_EXPORT void ibv_unimport_pd(ibv_pd* pd) {
  if (!pd) return;
  if (is_soft(pd->context)) {
    errno = EOPNOTSUPP;
    return;
  }
  SOFTVERBS_FORWARD_VOID(ibv_unimport_pd, pd);
}

SOFTVERBS_EXPORT ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
  if (!pd) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_soft(pd->context)) SOFTVERBS_FORWARD(nullptr, ibv_import_mr, pd, mr_handle);
  errno = EOPNOTSUPP;
  return nullptr;
}

SOFTVERBS_EXPORT void ibv_unimport_mr(ibv_mr* mr) {
  if (!mr) return;
  if (is_soft(mr->context)) {
    errno = EOPNOTSUPP;
    return;
  }
  SOFTVERBS_FORWARD_VOID(ibv_unimport_mr, mr);
}

SOFTVERBS_EXPORT ibv_dm* ibv_import_dm(ibv_context* context, uint32_t dm_handle) {
  if (!context) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_soft(context)) SOFTVERBS_FORWARD(nullptr, ibv_import_dm, context, dm_handle);
  errno = EOPNOTSUPP;
  return nullptr;
}

SOFTVERBS_EXPORT void ibv_unimport_dm(ibv_dm* dm) {
  if (!dm) return;
  if (is_soft(dm->context)) {
    errno = EOPNOTSUPP;
    return;
  }
  SOFTVERBS_FORWARD_VOID(ibv_unimport_dm, dm);
}
