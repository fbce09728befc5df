// An open soft device: a struct verbs_context laid out exactly as verbs.h
// defines it, so the inline verbs (ibv_post_send, ibv_poll_cq,
// ibv_query_port, ibv_query_device_ex, ...) dispatch through its ops, plus
// the soft HCA and the context's bookkeeping.
#pragma once

#include <infiniband/verbs.h>

#include <memory>

#include "emulator/objects/hca.h"
#include "provider/async_events.h"
#include "provider/objects.h"

namespace softverbs::provider {

struct SoftContext {
  // First, so that ibv_context (the last member of verbs_context) converts
  // back to SoftContext at a fixed offset.
  verbs_context vctx{};
  SoftDevice* device = nullptr;
  std::unique_ptr<Hca> hca;
  ContextObjects objects;
  AsyncEventQueue async_events{objects};  // owns async_fd

  ibv_context* ibv() { return &vctx.context; }
};

// Opens the soft HCA of `device`; nullptr with `err` set on failure.
SoftContext* open_soft_context(SoftDevice& device, Errno& err);
// Destroys whatever objects the application left behind (QPs, MRs, CQs, PDs,
// as the kernel does when a verbs file is closed), then the HCA.
void close_soft_context(SoftContext* context);

// Creation shared by the plain and the extended create verbs; nullptr with
// errno set on failure. The caller has checked what only its verb has.
//
// A CQ of `cqe` entries, reporting completion events to `channel` (of this
// context, else EINVAL), recording in each completion the times `stamps`
// (CqStamps) asks for, made on `parent_domain` if given (parent_domain.h).
// EINVAL for cqe above max_cqe.
SoftCq* create_soft_cq(SoftContext& context, uint32_t cqe, void* cq_context,
                       ibv_comp_channel* channel, uint32_t stamps,
                       SoftPd* parent_domain = nullptr);
// A QP of `pd` from the fields of ibv_qp_init_attr at the start of `attr`
// (qp_context ... sq_sig_all); attr.cap is updated with what was granted.
// EINVAL for CQs of another context or an SRQ given; EOPNOTSUPP for QP
// types a soft device does not have.
SoftQp* create_soft_qp(SoftContext& context, ibv_pd* pd, ibv_qp_init_attr_ex& attr);

// Teardown shared by the destroy verbs and close_soft_context. The caller
// has checked that nothing still uses the object. With `wait_for_acks`, the
// call blocks until the application has acknowledged every event it got for
// the object (ibv_destroy_cq(3), ibv_get_async_event(3)).
void destroy_soft_qp(SoftContext& context, SoftQp* qp, bool wait_for_acks);
void destroy_soft_cq(SoftContext& context, SoftCq* cq, bool wait_for_acks);
void destroy_soft_mr(SoftContext& context, SoftMr* mr);
void destroy_soft_pd(SoftContext& context, SoftPd* pd);
void destroy_soft_srq(SoftContext& context, SoftSrq* srq, bool wait_for_acks);
void destroy_soft_ah(SoftContext& context, SoftAh* ah);
void destroy_soft_dm(SoftContext& context, SoftDm* dm);
void destroy_soft_mw(SoftContext& context, SoftMw* mw);

// Fills the ibv_mr of a registered soft MR and records it in the context.
ibv_mr* publish_soft_mr(SoftContext& context, std::unique_ptr<SoftMr> mr, ibv_pd* pd, void* addr,
                        size_t length);
// ibv_rereg_mr(3) on a soft MR: 0 or an ibv_rereg_mr_err_code, errno set.
int rereg_soft_mr(SoftContext& context, SoftMr* mr, int flags, ibv_pd* pd, void* addr,
                  size_t length, int access);
// The memory ops of verbs_context: null MRs, ibv_advise_mr, device memory.
void set_memory_ops(verbs_context& vctx);
void set_advise_mr_op(verbs_context& vctx);
void set_device_memory_ops(verbs_context& vctx);
// Thread and parent domains (domain_verbs.cc): the ops, ibv_dealloc_pd of a
// parent domain (EBUSY while objects use it), and what destroying one gives
// back to its PD and TD.
void set_domain_ops(verbs_context& vctx);
int dealloc_parent_domain(SoftContext& context, SoftPd* domain);
void release_parent_domain(SoftPd& domain);
// The extended-verbs op of SRQs (ibv_create_srq_ex).
void set_srq_ops(verbs_context& vctx);
// The XRC ops (xrc_verbs.cc): open/close_xrcd, open_qp, get_srq_num.
void set_xrc_ops(verbs_context& vctx);
// An XRC target QP in attr.xrcd (a soft XRCD of this context); attr.cap is
// zeroed. nullptr with errno set on failure.
SoftQp* create_soft_xrc_target_qp(SoftContext& context, ibv_qp_init_attr_ex& attr);

// The ops the inline verbs reach through the context (fast path: no
// allocation, no locks of the provider's own).
int soft_poll_cq(ibv_cq* cq, int num_entries, ibv_wc* wc);
int soft_req_notify_cq(ibv_cq* cq, int solicited_only);
int soft_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr);
int soft_post_recv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
int soft_query_port(ibv_context* context, uint8_t port_num,
                    ibv_port_attr* port_attr, size_t port_attr_len);
int soft_query_device_ex(ibv_context* context,
                         const ibv_query_device_ex_input* input,
                         ibv_device_attr_ex* attr, size_t attr_size);
// The extended verbs (qp_ex_verbs.cc, cq_ex_verbs.cc, device_verbs.cc).
ibv_qp* soft_create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr);
ibv_cq_ex* soft_create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr);
int soft_modify_cq(ibv_cq* cq, ibv_modify_cq_attr* attr);
int soft_query_rt_values(ibv_context* context, ibv_values_ex* values);
int soft_post_srq_recv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr);
// Memory windows (memory_window_verbs.cc): alloc_mw, bind_mw, dealloc_mw.
void set_memory_window_ops(ibv_context_ops& ops);

}  // namespace softverbs::provider
