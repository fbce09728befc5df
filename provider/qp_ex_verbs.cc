// ibv_create_qp_ex(3): the extended attributes, then the creation every QP
// shares (create_soft_qp), and for IBV_QP_INIT_ATTR_SEND_OPS_FLAGS the
// ibv_qp_ex with its ibv_wr_* builders (qp_ex_builders.cc).
#include <memory>

#include "provider/exports.h"
#include "provider/extended_attributes.h"
#include "provider/qp_ex_builders.h"
#include "provider/soft_context.h"

namespace softverbs::provider {

ibv_qp* soft_create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  SoftContext* soft = soft_context(context);
  if (!soft || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  if (Errno err = check_create_qp_ex(*attr)) {
    errno = err;
    return nullptr;
  }
  if (attr->qp_type == IBV_QPT_XRC_RECV) {
    if (attr->xrcd->context != context) {
      errno = EINVAL;
      return nullptr;
    }
    // A target posts nothing: it has no ibv_qp_ex builders to install.
    SoftQp* qp = errno_on_exception([&] { return create_soft_xrc_target_qp(*soft, *attr); },
                                    static_cast<SoftQp*>(nullptr));
    return qp ? &qp->ibv : nullptr;
  }
  if (attr->pd->context != context) {
    errno = EINVAL;
    return nullptr;
  }
  const bool with_send_ops = attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  std::unique_ptr<SendWrBatch> batch;
  if (with_send_ops) {
    batch.reset(new (std::nothrow) SendWrBatch);
    if (!batch) {
      errno = ENOMEM;
      return nullptr;
    }
  }
  SoftQp* qp = create_soft_qp(*soft, attr->pd, *attr);
  if (!qp) return nullptr;
  if (with_send_ops) {
    qp->send_wr_batch = std::move(batch);
    install_send_wr_builders(*qp, attr->send_ops_flags);
  }
  return &qp->ibv;
}

}  // namespace softverbs::provider
