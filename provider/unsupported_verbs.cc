// Verbs a soft device does not implement yet. Each fails the way its man
// page allows (NULL + errno, or the errno value), for soft objects only;
// the list is kept in docs/unsupported-verbs.md.
#include "provider/exports.h"
#include "provider/real_library.h"
#include "provider/soft_context.h"

namespace softverbs::provider {

int soft_post_srq_recv(ibv_srq*, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  if (bad_wr) *bad_wr = wr;
  return EOPNOTSUPP;
}

ibv_mw* soft_alloc_mw(ibv_pd*, ibv_mw_type) {
  errno = EOPNOTSUPP;
  return nullptr;
}

int soft_bind_mw(ibv_qp*, ibv_mw*, ibv_mw_bind*) { return EOPNOTSUPP; }

int soft_dealloc_mw(ibv_mw*) { return EOPNOTSUPP; }

}  // namespace softverbs::provider

using namespace softverbs;
using namespace softverbs::provider;

SOFTVERBS_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr) {
  if (!pd) {
    errno = EINVAL;
    return nullptr;
  }
  if (!is_soft(pd->context)) SOFTVERBS_FORWARD(nullptr, ibv_create_srq, pd, srq_init_attr);
  errno = EOPNOTSUPP;
  return nullptr;
}

SOFTVERBS_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask) {
  if (!srq) return EINVAL;
  if (!is_soft(srq->context))
    SOFTVERBS_FORWARD(ENOSYS, ibv_modify_srq, srq, srq_attr, srq_attr_mask);
  return EOPNOTSUPP;
}

SOFTVERBS_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr) {
  if (!srq) return EINVAL;
  if (!is_soft(srq->context)) SOFTVERBS_FORWARD(ENOSYS, ibv_query_srq, srq, srq_attr);
  return EOPNOTSUPP;
}

SOFTVERBS_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  if (!srq) return EINVAL;
  if (!is_soft(srq->context)) SOFTVERBS_FORWARD(ENOSYS, ibv_destroy_srq, srq);
  return EOPNOTSUPP;
}

SOFTVERBS_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!qp) return EINVAL;
  if (!is_soft(qp->context)) SOFTVERBS_FORWARD(ENOSYS, ibv_attach_mcast, qp, gid, lid);
  return EOPNOTSUPP;
}

SOFTVERBS_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!qp) return EINVAL;
  if (!is_soft(qp->context)) SOFTVERBS_FORWARD(ENOSYS, ibv_detach_mcast, qp, gid, lid);
  return EOPNOTSUPP;
}

SOFTVERBS_EXPORT int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
  if (!qp) return EINVAL;
  if (!is_soft(qp->context)) SOFTVERBS_FORWARD(ENOSYS, ibv_query_ece, qp, ece);
  return EOPNOTSUPP;
}

SOFTVERBS_EXPORT int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
  if (!qp) return EINVAL;
  if (!is_soft(qp->context)) SOFTVERBS_FORWARD(ENOSYS, ibv_set_ece, qp, ece);
  return EOPNOTSUPP;
}
