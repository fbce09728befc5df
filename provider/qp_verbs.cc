// Queue pairs: create, modify, query, destroy, and the post fast path.
#include <array>
#include <cstddef>
#include <cstring>
#include <new>
#include <span>

#include "provider/exports.h"
#include "provider/parent_domain.h"
#include "provider/post_chain.h"
#include "provider/real_library.h"
#include "provider/send_wr_translation.h"
#include "provider/soft_context.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

Errno post_one_send(const ibv_qp& ibv, Qp& qp, const ibv_send_wr& wr) {
  StackRoom stack;
  SendRequest request;
  if (Errno err = translate_send_wr(wr, stack.room(), request, &ibv)) return err;
  return qp.post_send(request);
}

// The CQ a QP may use: one of this context's.
bool is_cq_of(const ibv_cq* cq, const ibv_context* context) {
  return cq && cq->context == context;
}

}  // namespace

int soft_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Qp& hca_qp = *soft_of<SoftQp>(qp)->qp;
  return post_chain(wr, bad_wr, [qp, &hca_qp](const ibv_send_wr& one) {
    return post_one_send(*qp, hca_qp, one);
  });
}

int soft_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Qp& hca_qp = *soft_of<SoftQp>(qp)->qp;
  return post_recv_chain(wr, bad_wr,
                         [&hca_qp](const RecvRequest& request) { return hca_qp.post_recv(request); });
}

namespace {

// The HCA's QP for `attr`, or nullptr with errno set.
std::unique_ptr<Qp> create_hca_qp(SoftContext& context, ibv_pd* pd,
                                  ibv_qp_init_attr_ex& attr, bool& sq_sig_all) {
  QpType type;
  if (Errno err = from_ibv_qp_type(raw_value(attr.qp_type), type)) {
    errno = err;
    return nullptr;
  }
  // An XRC initiator receives nothing (its receive CQ and SRQ are ignored,
  // as the kernel ignores them); a target is made from an XRCD instead.
  const bool receives = type != QpType::kXrcSend;
  if (type == QpType::kXrcRecv || !is_cq_of(attr.send_cq, pd->context) ||
      (receives && !is_cq_of(attr.recv_cq, pd->context)) ||
      (receives && attr.srq && attr.srq->context != pd->context)) {
    errno = EINVAL;
    return nullptr;
  }
  Hca::QpInit init;
  init.type = type;
  init.send_cq = soft_of<SoftCq>(attr.send_cq)->cq.get();
  if (receives) init.recv_cq = soft_of<SoftCq>(attr.recv_cq)->cq.get();
  init.cap = from_ibv_qp_cap(attr.cap);
  init.sq_sig_all = attr.sq_sig_all != 0;
  if (receives && attr.srq) init.srq = soft_of<SoftSrq>(attr.srq)->srq.get();
  Errno err = 0;
  std::unique_ptr<Qp> qp = context.hca->create_qp(soft_of<SoftPd>(pd)->protection_domain(), init, err);
  if (!qp) {
    errno = err ? err : ENOMEM;
    return nullptr;
  }
  // A real HCA reports what it granted, which may exceed the request.
  to_ibv_qp_cap(init.cap, attr.cap);
  sq_sig_all = init.sq_sig_all;
  return qp;
}

void fill_ibv_qp(ibv_qp& ibv, ibv_pd* pd, const ibv_qp_init_attr_ex& attr, uint32_t qpn) {
  const bool receives = attr.qp_type != IBV_QPT_XRC_SEND;
  ibv.context = pd->context;
  ibv.qp_context = attr.qp_context;
  ibv.pd = pd;
  ibv.send_cq = attr.send_cq;
  ibv.recv_cq = receives ? attr.recv_cq : nullptr;
  ibv.srq = receives ? attr.srq : nullptr;
  ibv.handle = qpn;
  ibv.qp_num = qpn;
  ibv.state = IBV_QPS_RESET;
  ibv.qp_type = attr.qp_type;
  pthread_mutex_init(&ibv.mutex, nullptr);
  pthread_cond_init(&ibv.cond, nullptr);
  ibv.events_completed = 0;
}

}  // namespace

SoftQp* create_soft_qp(SoftContext& context, ibv_pd* pd, ibv_qp_init_attr_ex& attr) {
  return errno_on_exception(
      [&]() -> SoftQp* {
        SoftObjectPtr<SoftQp> qp(new_soft_object<SoftQp>(parent_domain_of(pd), kResourceTypeQp));
        if (!qp) return nullptr;
        qp->qp = create_hca_qp(context, pd, attr, qp->sq_sig_all);
        if (!qp->qp) return nullptr;
        {
          std::lock_guard lock(context.objects.mutex);
          context.objects.qps.emplace(qp->qp.get(), qp.get());
        }
        fill_ibv_qp(qp->ibv, pd, attr, qp->qp->qpn());
        return qp.release();
      },
      static_cast<SoftQp*>(nullptr));
}

void destroy_soft_qp(SoftContext& context, SoftQp* qp, bool wait_for_acks) {
  {
    std::lock_guard lock(context.objects.mutex);
    if (qp->opened) {
      context.objects.opened_qps.erase(qp);
    } else {
      context.objects.qps.erase(qp->qp.get());
    }
  }
  context.async_events.forget(&qp->ibv);
  qp->qp.reset();
  ibv_qp& ibv = qp->ibv;
  if (wait_for_acks) {
    // ibv_get_async_event(3): destroy waits for the events it handed out.
    pthread_mutex_lock(&ibv.mutex);
    while (ibv.events_completed != qp->async_events_delivered)
      pthread_cond_wait(&ibv.cond, &ibv.mutex);
    pthread_mutex_unlock(&ibv.mutex);
  }
  pthread_cond_destroy(&ibv.cond);
  pthread_mutex_destroy(&ibv.mutex);
  delete_soft_object(qp);
}

}  // namespace softverbs::provider

using namespace softverbs;
using namespace softverbs::provider;

SOFTVERBS_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init_attr) {
  if (!pd || !init_attr) {
    errno = EINVAL;
    return nullptr;
  }
  SoftContext* context = soft_context(pd->context);
  if (!context) SOFTVERBS_FORWARD(nullptr, ibv_create_qp, pd, init_attr);
  ibv_qp_init_attr_ex attr{};
  attr.qp_context = init_attr->qp_context;
  attr.send_cq = init_attr->send_cq;
  attr.recv_cq = init_attr->recv_cq;
  attr.srq = init_attr->srq;
  attr.cap = init_attr->cap;
  attr.qp_type = init_attr->qp_type;
  attr.sq_sig_all = init_attr->sq_sig_all;
  SoftQp* qp = create_soft_qp(*context, pd, attr);
  if (!qp) return nullptr;
  init_attr->cap = attr.cap;
  return &qp->ibv;
}

SOFTVERBS_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  if (!qp || !attr) return EINVAL;
  if (!is_soft(qp->context)) SOFTVERBS_FORWARD(ENOSYS, ibv_modify_qp, qp, attr, attr_mask);
  QpAttributes attributes;
  uint32_t mask = 0;
  if (Errno err = from_ibv_qp_attr(*attr, attr_mask, attributes, mask)) return err;
  // The HCA checks the transition against the IBTA table and changes
  // nothing when it refuses.
  Qp& hca_qp = *soft_of<SoftQp>(qp)->qp;
  if (Errno err = errno_on_exception([&] { return hca_qp.modify(attributes, mask); }, ENOMEM))
    return err;
  if (attr_mask & IBV_QP_STATE) qp->state = attr->qp_state;
  return 0;
}

SOFTVERBS_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask,
                                  ibv_qp_init_attr* init_attr) {
  if (!qp || !attr || !init_attr) return EINVAL;
  if (!is_soft(qp->context))
    SOFTVERBS_FORWARD(ENOSYS, ibv_query_qp, qp, attr, attr_mask, init_attr);
  SoftQp* soft = soft_of<SoftQp>(qp);
  QpAttributes attributes;
  if (Errno err = errno_on_exception([&] { return soft->qp->query(attributes); }, ENOMEM))
    return err;
  // The attr_mask is a hint (ibv_query_qp(3)); everything is returned.
  to_ibv_qp_attr(attributes, *attr);
  std::memset(init_attr, 0, sizeof(*init_attr));
  init_attr->qp_context = qp->qp_context;
  init_attr->send_cq = qp->send_cq;
  init_attr->recv_cq = qp->recv_cq;
  init_attr->srq = qp->srq;
  to_ibv_qp_cap(attributes.cap, init_attr->cap);
  init_attr->qp_type = qp->qp_type;
  init_attr->sq_sig_all = soft->sq_sig_all ? 1 : 0;
  if (attr_mask & IBV_QP_STATE) qp->state = attr->qp_state;
  return 0;
}

SOFTVERBS_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  if (!qp) return EINVAL;
  SoftContext* context = soft_context(qp->context);
  if (!context) SOFTVERBS_FORWARD(ENOSYS, ibv_destroy_qp, qp);
  destroy_soft_qp(*context, soft_of<SoftQp>(qp), true);
  return 0;
}

SOFTVERBS_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  if (!qp) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_soft(qp->context)) SOFTVERBS_FORWARD(nullptr, ibv_qp_to_qp_ex, qp);
  // As libibverbs with mlx5: only a QP created by ibv_create_qp_ex with
  // IBV_QP_INIT_ATTR_SEND_OPS_FLAGS has one; for any other, NULL with errno
  // untouched, as libibverbs returns it.
  SoftQp* soft = soft_of<SoftQp>(qp);
  return soft->send_wr_batch ? &soft->ibv_ex : nullptr;
}

SOFTVERBS_EXPORT int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op,
                                                uint32_t flags) {
  if (!qp) return 0;
  if (!is_soft(qp->context))
    SOFTVERBS_FORWARD(0, ibv_query_qp_data_in_order, qp, op, flags);
  // No in-order guarantee is promised: poll for the completion.
  return 0;
}
