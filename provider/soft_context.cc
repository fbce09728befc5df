#include "provider/soft_context.h"

#include <algorithm>
#include <sys/eventfd.h>
#include <unistd.h>

#include <new>
#include <vector>


namespace softverbs::provider {
namespace {

void set_ops(verbs_context& vctx) {
  ibv_context_ops& ops = vctx.context.ops;
  ops.poll_cq = soft_poll_cq;
  ops.req_notify_cq = soft_req_notify_cq;
  ops.post_send = soft_post_send;
  ops.post_recv = soft_post_recv;
  ops.post_srq_recv = soft_post_srq_recv;
  set_memory_window_ops(ops);
  // Everything else stays NULL, so the inline verbs that look for an op
  // (ibv_open_xrcd, ibv_create_flow, ...) fail with EOPNOTSUPP instead of
  // pretending.
  vctx.query_port = soft_query_port;
  vctx.query_device_ex = soft_query_device_ex;
  vctx.create_qp_ex = soft_create_qp_ex;
  vctx.create_cq_ex = soft_create_cq_ex;
  vctx.modify_cq = soft_modify_cq;
  vctx.query_rt_values = soft_query_rt_values;
  set_srq_ops(vctx);
  set_xrc_ops(vctx);
  set_domain_ops(vctx);
  set_memory_ops(vctx);
}

}  // namespace

SoftContext* open_soft_context(SoftDevice& device, Errno& err) {
  std::unique_ptr<SoftContext> context(new (std::nothrow) SoftContext);
  if (!context) {
    err = ENOMEM;
    return nullptr;
  }
  context->device = &device;
  context->hca = Hca::open(device.description.index, err);
  if (!context->hca) return nullptr;
  if ((err = context->async_events.open())) return nullptr;

  verbs_context& vctx = context->vctx;
  vctx.sz = sizeof(verbs_context);
  set_ops(vctx);
  ibv_context& ibv = vctx.context;
  ibv.device = &device.ibv;
  ibv.async_fd = context->async_events.fd();
  // cmd_fd is where a kernel provider talks to uverbs. A soft context has no
  // such channel, but programs poll, fcntl or close-on-exec it, so it gets a
  // valid fd of its own: an eventfd that never becomes readable. (A dup of
  // async_fd would wake such pollers on async events.)
  ibv.cmd_fd = ::eventfd(0, EFD_CLOEXEC);
  if (ibv.cmd_fd < 0) {
    err = errno;
    return nullptr;
  }
  ibv.num_comp_vectors = 1;
  pthread_mutex_init(&ibv.mutex, nullptr);
  ibv.abi_compat = __VERBS_ABI_IS_EXTENDED;
  context->hca->set_async_event_sink(&context->async_events);
  err = 0;
  return context.release();
}

void close_soft_context(SoftContext* context) {
  // Snapshot first: the destroyers take objects.mutex themselves.
  std::vector<SoftQp*> qps;
  std::vector<SoftMr*> mrs;
  std::vector<SoftCq*> cqs;
  std::vector<SoftPd*> pds;
  std::vector<SoftSrq*> srqs;
  std::vector<SoftAh*> ahs;
  std::vector<SoftQp*> opened_qps;
  std::vector<SoftXrcd*> xrcds;
  std::vector<SoftDm*> dms;
  std::vector<SoftMw*> mws;
  std::vector<SoftTd*> tds;
  {
    std::lock_guard lock(context->objects.mutex);
    for (auto& [key, qp] : context->objects.qps) qps.push_back(qp);
    for (SoftMr* mr : context->objects.mrs) mrs.push_back(mr);
    for (auto& [key, cq] : context->objects.cqs) cqs.push_back(cq);
    for (SoftPd* pd : context->objects.pds) pds.push_back(pd);
    for (auto& [key, srq] : context->objects.srqs) srqs.push_back(srq);
    for (SoftAh* ah : context->objects.ahs) ahs.push_back(ah);
    for (SoftQp* qp : context->objects.opened_qps) opened_qps.push_back(qp);
    for (SoftXrcd* xrcd : context->objects.xrcds) xrcds.push_back(xrcd);
    context->objects.xrcds.clear();
    for (SoftDm* dm : context->objects.dms) dms.push_back(dm);
    for (SoftMw* mw : context->objects.mws) mws.push_back(mw);
    for (SoftTd* td : context->objects.tds) tds.push_back(td);
  }
  for (SoftQp* qp : opened_qps) destroy_soft_qp(*context, qp, false);
  for (SoftQp* qp : qps) destroy_soft_qp(*context, qp, false);
  for (SoftSrq* srq : srqs) destroy_soft_srq(*context, srq, false);
  for (SoftXrcd* xrcd : xrcds) delete xrcd;
  for (SoftAh* ah : ahs) destroy_soft_ah(*context, ah);
  for (SoftMw* mw : mws) destroy_soft_mw(*context, mw);
  for (SoftMr* mr : mrs) destroy_soft_mr(*context, mr);
  for (SoftDm* dm : dms) destroy_soft_dm(*context, dm);
  for (SoftCq* cq : cqs) destroy_soft_cq(*context, cq, false);
  // Parent domains before the PDs they stand for, then thread domains.
  std::stable_partition(pds.begin(), pds.end(), [](SoftPd* pd) { return pd->is_parent_domain(); });
  for (SoftPd* pd : pds) destroy_soft_pd(*context, pd);
  for (SoftTd* td : tds) delete td;

  context->hca->set_async_event_sink(nullptr);
  context->hca.reset();
  ::close(context->vctx.context.cmd_fd);
  pthread_mutex_destroy(&context->vctx.context.mutex);
  delete context;  // closes async_fd
}

SoftContext* soft_context(ibv_context* context) {
  if (!is_soft(context)) return nullptr;
  // open code container_of: ibv_context is the last member of verbs_context,
  // which is the first member of SoftContext.
  auto* vctx = reinterpret_cast<verbs_context*>(
      reinterpret_cast<char*>(context) - offsetof(verbs_context, context));
  return reinterpret_cast<SoftContext*>(vctx);
}

}  // namespace softverbs::provider
