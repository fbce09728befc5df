// XRC (ibv_open_xrcd(3), ibv_open_qp(3), ibv_get_srq_num(3)): the domains,
// the target QPs created in them and the handles ibv_open_qp gives to an
// existing target. XRC SRQs are in srq_verbs.cc, initiators are ordinary
// QPs (qp_verbs.cc) whose WRs name a remote SRQ.
#include <fcntl.h>
#include <sys/stat.h>

#include <memory>

#include "provider/exports.h"
#include "provider/soft_context.h"

namespace softverbs::provider {
namespace {

constexpr uint32_t kRequiredXrcdMask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
constexpr uint32_t kRequiredOpenQpMask =
    IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;

// The rule libibverbs applies to an extended attribute's comp_mask: a bit
// at or past `reserved` is EOPNOTSUPP, a missing `required` bit EINVAL.
Errno check_comp_mask(uint32_t mask, uint32_t reserved, uint32_t required) {
  if (mask >= reserved) return EOPNOTSUPP;
  return (mask & required) == required ? 0 : EINVAL;
}

// The file an XRC domain is shared through, as the kernel finds it: by
// inode. EBADF for an fd that names nothing.
Errno file_identity(int fd, Hca::FileIdentity& out) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return EBADF;
  out = Hca::FileIdentity{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  return 0;
}

ibv_xrcd* open_xrcd(SoftContext& context, const ibv_xrcd_init_attr& attr) {
  Hca::FileIdentity file;
  const bool on_file = attr.fd != -1;
  if (on_file) {
    if (Errno err = file_identity(attr.fd, file)) {
      errno = err;
      return nullptr;
    }
  }
  std::unique_ptr<SoftXrcd> xrcd(new SoftXrcd{});
  Errno err = 0;
  // Not under objects.mutex: the HCA's object lock comes before the QPs'
  // locks, and a QP's async event takes objects.mutex.
  xrcd->xrcd = context.hca->open_xrcd(on_file ? &file : nullptr, attr.oflags & O_CREAT,
                                      attr.oflags & O_EXCL, err);
  if (!xrcd->xrcd) {
    errno = err ? err : ENOMEM;
    return nullptr;
  }
  {
    std::lock_guard lock(context.objects.mutex);
    context.objects.xrcds.insert(xrcd.get());
  }
  xrcd->opened_on_file = on_file;
  xrcd->ibv.context = context.ibv();
  return &xrcd.release()->ibv;
}

// A target QP of this context with number `qp_num` in `xrcd`'s domain.
SoftQp* find_target_qp(SoftContext& context, uint32_t qp_num, const Xrcd* xrcd) {
  std::lock_guard lock(context.objects.mutex);
  for (auto& [key, qp] : context.objects.qps) {
    if (qp->ibv.qp_type == IBV_QPT_XRC_RECV && qp->ibv.qp_num == qp_num &&
        qp->xrcd.get() == xrcd)
      return qp;
  }
  return nullptr;
}

void fill_target_qp(ibv_qp& ibv, ibv_context* context, void* qp_context, uint32_t qpn) {
  ibv.context = context;
  ibv.qp_context = qp_context;
  ibv.handle = qpn;
  ibv.qp_num = qpn;
  ibv.state = IBV_QPS_RESET;
  ibv.qp_type = IBV_QPT_XRC_RECV;
  pthread_mutex_init(&ibv.mutex, nullptr);
  pthread_cond_init(&ibv.cond, nullptr);
  ibv.events_completed = 0;
}

}  // namespace

ibv_xrcd* soft_open_xrcd(ibv_context* context, ibv_xrcd_init_attr* attr) {
  SoftContext* soft = soft_context(context);
  if (!soft || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  if (Errno err =
          check_comp_mask(attr->comp_mask, IBV_XRCD_INIT_ATTR_RESERVED, kRequiredXrcdMask)) {
    errno = err;
    return nullptr;
  }
  return errno_on_exception([&] { return open_xrcd(*soft, *attr); },
                            static_cast<ibv_xrcd*>(nullptr));
}

int soft_close_xrcd(ibv_xrcd* ibv) {
  SoftContext* context = soft_context(ibv->context);
  auto* xrcd = reinterpret_cast<SoftXrcd*>(ibv);
  {
    std::lock_guard lock(context->objects.mutex);
    // A private domain still holding SRQs or target QPs stays (the kernel's
    // EBUSY); a domain on a file lives on for them and its other handles.
    if (!xrcd->opened_on_file && xrcd->xrcd->users.load() != 0) return EBUSY;
    context->objects.xrcds.erase(xrcd);
  }
  delete xrcd;
  return 0;
}

SoftQp* create_soft_xrc_target_qp(SoftContext& context, ibv_qp_init_attr_ex& attr) {
  auto* xrcd = reinterpret_cast<SoftXrcd*>(attr.xrcd);
  std::unique_ptr<SoftQp> qp(new SoftQp{});
  Errno err = 0;
  qp->qp = context.hca->create_xrc_target_qp(*xrcd->xrcd, err);
  if (!qp->qp) {
    errno = err ? err : ENOMEM;
    return nullptr;
  }
  qp->xrcd = xrcd->xrcd;
  fill_target_qp(qp->ibv, context.ibv(), attr.qp_context, qp->qp->qpn());
  // Recorded as libibverbs records them, though a target uses none of them:
  // librdmacm takes the PD of an XRC id's QP for its SRQ.
  if (attr.comp_mask & IBV_QP_INIT_ATTR_PD) qp->ibv.pd = attr.pd;
  qp->ibv.send_cq = attr.send_cq;
  qp->ibv.recv_cq = attr.recv_cq;
  // A target has no queues: ibv_create_qp_ex(3) reports zero capabilities.
  attr.cap = ibv_qp_cap{};
  std::lock_guard lock(context.objects.mutex);
  context.objects.qps.emplace(qp->qp.get(), qp.get());
  return qp.release();
}

ibv_qp* soft_open_qp(ibv_context* context, ibv_qp_open_attr* attr) {
  SoftContext* soft = soft_context(context);
  if (!soft || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  if (Errno err =
          check_comp_mask(attr->comp_mask, IBV_QP_OPEN_ATTR_RESERVED, kRequiredOpenQpMask)) {
    errno = err;
    return nullptr;
  }
  if (!attr->xrcd ||
      attr->xrcd->context != context || attr->qp_type != IBV_QPT_XRC_RECV) {
    errno = EINVAL;
    return nullptr;
  }
  const auto* xrcd = reinterpret_cast<SoftXrcd*>(attr->xrcd);
  SoftQp* target = find_target_qp(*soft, attr->qp_num, xrcd->xrcd.get());
  if (!target) {
    errno = EINVAL;  // no target QP with that number in the domain
    return nullptr;
  }
  return errno_on_exception(
      [&]() -> ibv_qp* {
        std::unique_ptr<SoftQp> opened(new SoftQp{});
        opened->qp = target->qp;
        opened->xrcd = target->xrcd;
        opened->opened = true;
        void* qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : nullptr;
        fill_target_qp(opened->ibv, context, qp_context, attr->qp_num);
        opened->ibv.state = target->ibv.state;
        std::lock_guard lock(soft->objects.mutex);
        soft->objects.opened_qps.insert(opened.get());
        return &opened.release()->ibv;
      },
      static_cast<ibv_qp*>(nullptr));
}

int soft_get_srq_num(ibv_srq* srq, uint32_t* srq_num) {
  if (!srq || !srq_num) return EINVAL;
  *srq_num = soft_of<SoftSrq>(srq)->srq->srqn();
  return 0;
}

void set_xrc_ops(verbs_context& vctx) {
  vctx.open_xrcd = soft_open_xrcd;
  vctx.close_xrcd = soft_close_xrcd;
  vctx.open_qp = soft_open_qp;
  vctx.get_srq_num = soft_get_srq_num;
}

}  // namespace softverbs::provider
