// Queue pairs: create, modify, query, destroy, and the post fast path.
#include <array>
#include <cstddef>
#include <cstring>
#include <new>
#include <span>

#include "provider/exports.h"
#include "provider/post_chain.h"
#include "provider/real_library.h"
#include "provider/soft_context.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

// IBV_SEND_INLINE: the bytes are copied now, the caller may reuse its
// buffers as soon as ibv_post_send returns.
Errno gather_inline(const ibv_sge* list, int count,
                    std::array<uint8_t, kMaxInlineData>& out, size_t& length) {
  size_t total = 0;
  for (int i = 0; i < count; ++i) {
    total += list[i].length;
    if (total > out.size()) return EINVAL;  // above any QP's max_inline_data
  }
  uint8_t* cursor = out.data();
  for (int i = 0; i < count; ++i) {
    if (list[i].length == 0) continue;
    std::memcpy(cursor, reinterpret_cast<const void*>(list[i].addr), list[i].length);
    cursor += list[i].length;
  }
  length = total;
  return 0;
}

// The address handle of a UD WR: one of this QP's context.
Errno datagram_address(const ibv_qp& qp, const ibv_send_wr& wr, SendRequest& request) {
  const ibv_ah* ah = wr.wr.ud.ah;
  if (!ah || ah->context != qp.context) return EINVAL;
  request.ah = soft_of<SoftAh>(const_cast<ibv_ah*>(ah))->ah.get();
  request.remote_qpn = wr.wr.ud.remote_qpn;
  request.remote_qkey = wr.wr.ud.remote_qkey;
  return 0;
}

Errno post_one_send(const ibv_qp& ibv, Qp& qp, const ibv_send_wr& wr) {
  SendRequest request;
  if (Errno err = from_ibv_send_wr(wr, request)) return err;
  if (ibv.qp_type == IBV_QPT_UD) {
    if (Errno err = datagram_address(ibv, wr, request)) return err;
  }
  SgeScratch sges;
  if (Errno err = sges.gather(wr.sg_list, wr.num_sge)) return err;
  request.sges = sges.sges();
  std::array<uint8_t, kMaxInlineData> inline_bytes;  // left uninitialised
  if (wr.send_flags & IBV_SEND_INLINE) {
    size_t length = 0;
    if (Errno err = gather_inline(wr.sg_list, wr.num_sge, inline_bytes, length)) return err;
    request.inline_data = std::span<const uint8_t>(inline_bytes.data(), length);
  }
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

void destroy_soft_qp(SoftContext& context, SoftQp* qp, bool wait_for_acks) {
  {
    std::lock_guard lock(context.objects.mutex);
    context.objects.qps.erase(qp->qp.get());
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
  delete qp;
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

  QpType type;
  if (Errno err = from_ibv_qp_type(raw_value(init_attr->qp_type), type)) {
    errno = err;
    return nullptr;
  }
  if (!is_cq_of(init_attr->send_cq, pd->context) ||
      !is_cq_of(init_attr->recv_cq, pd->context) ||
      (init_attr->srq && init_attr->srq->context != pd->context)) {
    errno = EINVAL;
    return nullptr;
  }
  return errno_on_exception(
      [&]() -> ibv_qp* {
        Hca::QpInit init;
        init.type = type;
        init.send_cq = soft_of<SoftCq>(init_attr->send_cq)->cq.get();
        init.recv_cq = soft_of<SoftCq>(init_attr->recv_cq)->cq.get();
        if (init_attr->srq) init.srq = soft_of<SoftSrq>(init_attr->srq)->srq.get();
        init.cap = from_ibv_qp_cap(init_attr->cap);
        init.sq_sig_all = init_attr->sq_sig_all != 0;
        std::unique_ptr<SoftQp> qp(new SoftQp{});
        Errno err = 0;
        qp->qp = context->hca->create_qp(*soft_of<SoftPd>(pd)->pd, init, err);
        if (!qp->qp) {
          errno = err ? err : ENOMEM;
          return nullptr;
        }
        {
          std::lock_guard lock(context->objects.mutex);
          context->objects.qps.emplace(qp->qp.get(), qp.get());
        }
        // A real HCA reports what it granted, which may exceed the request.
        to_ibv_qp_cap(init.cap, init_attr->cap);
        qp->sq_sig_all = init.sq_sig_all;
        ibv_qp& ibv = qp->ibv;
        ibv.context = pd->context;
        ibv.qp_context = init_attr->qp_context;
        ibv.pd = pd;
        ibv.send_cq = init_attr->send_cq;
        ibv.recv_cq = init_attr->recv_cq;
        ibv.srq = init_attr->srq;
        ibv.handle = qp->qp->qpn();
        ibv.qp_num = qp->qp->qpn();
        ibv.state = IBV_QPS_RESET;
        ibv.qp_type = init_attr->qp_type;
        pthread_mutex_init(&ibv.mutex, nullptr);
        pthread_cond_init(&ibv.cond, nullptr);
        ibv.events_completed = 0;
        return &qp.release()->ibv;
      },
      static_cast<ibv_qp*>(nullptr));
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
  // Soft QPs come from ibv_create_qp only; the ibv_wr_* builders need
  // ibv_create_qp_ex, which is not supported yet.
  errno = EOPNOTSUPP;
  return nullptr;
}

SOFTVERBS_EXPORT int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op,
                                                uint32_t flags) {
  if (!qp) return 0;
  if (!is_soft(qp->context))
    SOFTVERBS_FORWARD(0, ibv_query_qp_data_in_order, qp, op, flags);
  // No in-order guarantee is promised: poll for the completion.
  return 0;
}
