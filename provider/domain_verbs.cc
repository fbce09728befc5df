// Thread domains and parent domains on a soft device (ibv_alloc_td(3),
// ibv_alloc_parent_domain(3)): the ops of verbs_context behind the inline
// verbs, and what ibv_dealloc_pd does with a parent domain. What a parent
// domain changes for the objects made on it is in parent_domain.h.
#include "provider/exports.h"
#include "provider/parent_domain.h"
#include "provider/soft_context.h"

namespace softverbs::provider {
namespace {

constexpr uint32_t kKnownParentDomainMask =
    IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;

ibv_td* soft_alloc_td(ibv_context* context, ibv_td_init_attr* attr) {
  SoftContext* soft = soft_context(context);
  if (!soft || !attr || attr->comp_mask != 0) {
    errno = EINVAL;
    return nullptr;
  }
  return errno_on_exception(
      [&]() -> ibv_td* {
        auto* td = new SoftTd{};
        td->ibv.context = context;
        std::lock_guard lock(soft->objects.mutex);
        soft->objects.tds.insert(td);
        return &td->ibv;
      },
      static_cast<ibv_td*>(nullptr));
}

int soft_dealloc_td(ibv_td* td) {
  SoftContext* soft = td ? soft_context(td->context) : nullptr;
  if (!soft) return EINVAL;
  SoftTd* soft_td = soft_of<SoftTd>(td);
  if (soft_td->parent_domains.load() != 0) return EBUSY;  // a parent domain holds it
  {
    std::lock_guard lock(soft->objects.mutex);
    soft->objects.tds.erase(soft_td);
  }
  delete soft_td;
  return 0;
}

// The checks of ibv_alloc_parent_domain(3): a PD (not a parent domain) and
// TD of this context, known comp_mask bits, both allocators or neither.
bool valid_parent_domain_attr(ibv_context* context, const ibv_parent_domain_init_attr& attr) {
  if (attr.comp_mask & ~kKnownParentDomainMask) return false;
  if (!attr.pd || attr.pd->context != context || parent_domain_of(attr.pd)) return false;
  if (attr.td && attr.td->context != context) return false;
  if ((attr.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) && (!attr.alloc || !attr.free))
    return false;
  return true;
}

ibv_pd* soft_alloc_parent_domain(ibv_context* context, ibv_parent_domain_init_attr* attr) {
  SoftContext* soft = soft_context(context);
  if (!soft || !attr || !valid_parent_domain_attr(context, *attr)) {
    errno = EINVAL;
    return nullptr;
  }
  return errno_on_exception(
      [&]() -> ibv_pd* {
        auto* domain = new SoftPd{};
        domain->protection = soft_of<SoftPd>(attr->pd);
        domain->protection->pd->users.fetch_add(1);  // ibv_dealloc_pd of it: EBUSY
        if (attr->td) {
          domain->td = soft_of<SoftTd>(attr->td);
          domain->td->parent_domains.fetch_add(1);
        }
        if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS) {
          domain->alloc = attr->alloc;
          domain->free = attr->free;
        }
        if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
          domain->pd_context = attr->pd_context;
        domain->ibv.context = context;
        domain->ibv.handle = attr->pd->handle;
        std::lock_guard lock(soft->objects.mutex);
        soft->objects.pds.insert(domain);
        return &domain->ibv;
      },
      static_cast<ibv_pd*>(nullptr));
}

}  // namespace

int dealloc_parent_domain(SoftContext& context, SoftPd* domain) {
  if (domain->users.load() != 0) return EBUSY;  // QPs, CQs or SRQs still on it
  destroy_soft_pd(context, domain);
  return 0;
}

void release_parent_domain(SoftPd& domain) {
  domain.protection->pd->users.fetch_sub(1);
  if (domain.td) domain.td->parent_domains.fetch_sub(1);
}

void set_domain_ops(verbs_context& vctx) {
  vctx.alloc_td = soft_alloc_td;
  vctx.dealloc_td = soft_dealloc_td;
  vctx.alloc_parent_domain = soft_alloc_parent_domain;
}

}  // namespace softverbs::provider
