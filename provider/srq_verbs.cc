// Shared receive queues: create (plain and _ex), modify, query, destroy,
// and the post fast path.
#include <pthread.h>

#include "provider/exports.h"
#include "provider/parent_domain.h"
#include "provider/post_chain.h"
#include "provider/real_library.h"
#include "provider/soft_context.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

// The SRQ attributes ibv_create_srq_ex may carry; of them, tag matching a
// soft device does not have.
constexpr uint32_t kKnownSrqInitMask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
                                       IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ |
                                       IBV_SRQ_INIT_ATTR_TM;
constexpr uint32_t kXrcSrqMask = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;

// An XRC SRQ's domain and CQ (ibv_create_srq_ex(3)), both of `context`.
struct XrcParts {
  SoftXrcd* xrcd = nullptr;
  ibv_cq* cq = nullptr;
};

ibv_srq* create_soft_srq(SoftContext& context, ibv_pd* pd, ibv_srq_attr& attr,
                         void* srq_context, XrcParts xrc = {}) {
  Hca::SrqInit init{attr.max_wr, attr.max_sge, attr.srq_limit};
  SoftObjectPtr<SoftSrq> srq(new_soft_object<SoftSrq>(parent_domain_of(pd), kResourceTypeSrq));
  if (!srq) return nullptr;
  if (xrc.xrcd) {
    srq->xrcd = xrc.xrcd->xrcd;
    init.xrcd = srq->xrcd.get();
    init.cq = soft_of<SoftCq>(xrc.cq)->cq.get();
  }
  Errno err = 0;
  srq->srq = context.hca->create_srq(soft_of<SoftPd>(pd)->protection_domain(), init, err);
  if (!srq->srq) {
    errno = err ? err : ENOMEM;
    return nullptr;
  }
  {
    std::lock_guard lock(context.objects.mutex);
    context.objects.srqs.emplace(srq->srq.get(), srq.get());
  }
  // ibv_create_srq(3): the attributes come back as granted.
  attr.max_wr = init.max_wr;
  attr.max_sge = init.max_sge;
  ibv_srq& ibv = srq->ibv;
  ibv.context = pd->context;
  ibv.srq_context = srq_context;
  ibv.pd = pd;
  ibv.handle = 0;
  pthread_mutex_init(&ibv.mutex, nullptr);
  pthread_cond_init(&ibv.cond, nullptr);
  ibv.events_completed = 0;
  return &srq.release()->ibv;
}

ibv_srq* soft_create_srq_ex(ibv_context* context, ibv_srq_init_attr_ex* attr) {
  if (!attr || (attr->comp_mask & ~kKnownSrqInitMask) ||
      !(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd ||
      attr->pd->context != context) {
    errno = EINVAL;
    return nullptr;
  }
  const bool typed = attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE;
  const bool xrc = typed && attr->srq_type == IBV_SRQT_XRC;
  if ((typed && attr->srq_type != IBV_SRQT_BASIC && !xrc) ||
      (attr->comp_mask & IBV_SRQ_INIT_ATTR_TM)) {
    errno = EOPNOTSUPP;  // tag-matching SRQs are not supported
    return nullptr;
  }
  XrcParts parts;
  if (xrc) {
    // ibv_create_srq_ex(3): an XRC SRQ needs its domain and its CQ.
    if ((attr->comp_mask & kXrcSrqMask) != kXrcSrqMask || !attr->xrcd || !attr->cq ||
        attr->xrcd->context != context || attr->cq->context != context) {
      errno = EINVAL;
      return nullptr;
    }
    parts = XrcParts{reinterpret_cast<SoftXrcd*>(attr->xrcd), attr->cq};
  }
  SoftContext& soft = *soft_context(context);
  return errno_on_exception(
      [&] { return create_soft_srq(soft, attr->pd, attr->attr, attr->srq_context, parts); },
      static_cast<ibv_srq*>(nullptr));
}

}  // namespace

int soft_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Srq& hca_srq = *soft_of<SoftSrq>(srq)->srq;
  return post_recv_chain(wr, bad_wr,
                         [&hca_srq](const RecvRequest& request) { return hca_srq.post_recv(request); });
}

void destroy_soft_srq(SoftContext& context, SoftSrq* srq, bool wait_for_acks) {
  {
    std::lock_guard lock(context.objects.mutex);
    context.objects.srqs.erase(srq->srq.get());
  }
  context.async_events.forget(&srq->ibv);
  srq->srq.reset();
  ibv_srq& ibv = srq->ibv;
  if (wait_for_acks) {
    // ibv_get_async_event(3): destroy waits for the events it handed out.
    pthread_mutex_lock(&ibv.mutex);
    while (ibv.events_completed != srq->async_events_delivered)
      pthread_cond_wait(&ibv.cond, &ibv.mutex);
    pthread_mutex_unlock(&ibv.mutex);
  }
  pthread_cond_destroy(&ibv.cond);
  pthread_mutex_destroy(&ibv.mutex);
  delete_soft_object(srq);
}

void set_srq_ops(verbs_context& vctx) { vctx.create_srq_ex = soft_create_srq_ex; }

}  // namespace softverbs::provider

using namespace softverbs;
using namespace softverbs::provider;

SOFTVERBS_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr) {
  if (!pd || !srq_init_attr) {
    errno = EINVAL;
    return nullptr;
  }
  SoftContext* context = soft_context(pd->context);
  if (!context) SOFTVERBS_FORWARD(nullptr, ibv_create_srq, pd, srq_init_attr);
  return errno_on_exception(
      [&] {
        return create_soft_srq(*context, pd, srq_init_attr->attr, srq_init_attr->srq_context);
      },
      static_cast<ibv_srq*>(nullptr));
}

SOFTVERBS_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask) {
  if (!srq || !srq_attr) return EINVAL;
  if (!is_soft(srq->context))
    SOFTVERBS_FORWARD(ENOSYS, ibv_modify_srq, srq, srq_attr, srq_attr_mask);
  if (srq_attr_mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  const uint32_t* max_wr = (srq_attr_mask & IBV_SRQ_MAX_WR) ? &srq_attr->max_wr : nullptr;
  const uint32_t* limit = (srq_attr_mask & IBV_SRQ_LIMIT) ? &srq_attr->srq_limit : nullptr;
  Srq& hca_srq = *soft_of<SoftSrq>(srq)->srq;
  return errno_on_exception([&] { return hca_srq.modify(max_wr, limit); }, ENOMEM);
}

SOFTVERBS_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr) {
  if (!srq || !srq_attr) return EINVAL;
  if (!is_soft(srq->context)) SOFTVERBS_FORWARD(ENOSYS, ibv_query_srq, srq, srq_attr);
  const Srq::State state = soft_of<SoftSrq>(srq)->srq->query();
  srq_attr->max_wr = state.max_wr;
  srq_attr->max_sge = state.max_sge;
  srq_attr->srq_limit = state.limit;
  return 0;
}

SOFTVERBS_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  if (!srq) return EINVAL;
  SoftContext* context = soft_context(srq->context);
  if (!context) SOFTVERBS_FORWARD(ENOSYS, ibv_destroy_srq, srq);
  SoftSrq* soft = soft_of<SoftSrq>(srq);
  // QPs still attached: the SRQ stays (ibv_destroy_srq(3) fails with EBUSY).
  if (soft->srq->users.load() != 0) return EBUSY;
  destroy_soft_srq(*context, soft, true);
  return 0;
}
