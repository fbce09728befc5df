// Verbs a soft device does not implement yet. Each fails the way its man
// page allows (NULL + errno, or the errno value), for soft objects only;
// the list is kept in docs/unsupported-verbs.md.
#include "provider/exports.h"
#include "provider/real_library.h"
#include "provider/soft_context.h"

using namespace softverbs;
using namespace softverbs::provider;

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
