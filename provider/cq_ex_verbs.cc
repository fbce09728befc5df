// Extended completion queues (ibv_create_cq_ex(3)): creation, the polling
// iterator ibv_start_poll / ibv_next_poll / ibv_end_poll with its read_*
// accessors, and ibv_modify_cq.
//
// The iterator takes one completion at a time from the HCA into
// SoftCq::polled, where the read_* functions find it; plain ibv_poll_cq on
// the same CQ keeps working (ibv_cq_ex_to_cq).
#include <span>

#include "provider/exports.h"
#include "provider/extended_attributes.h"
#include "provider/parent_domain.h"
#include "provider/soft_context.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

SoftCq& soft_cq_of(ibv_cq_ex* cq) { return *soft_of<SoftCq>(ibv_cq_ex_to_cq(cq)); }
const Completion& polled(ibv_cq_ex* cq) { return soft_cq_of(cq).polled; }

// The next completion into `polled`: ENOENT when there is none; EOVERFLOW
// once the CQ has overrun (the CQ is in error, as ibv_poll_cq's -1 says).
int poll_next(ibv_cq_ex* cq) noexcept {
  SoftCq& soft = soft_cq_of(cq);
  try {
    const int got = soft.cq->poll(std::span<Completion>(&soft.polled, 1));
    if (got == 0) return ENOENT;
    if (got < 0) return EOVERFLOW;
  } catch (...) {
    return ENOMEM;  // the caller is C
  }
  cq->wr_id = soft.polled.wr_id;
  cq->status = to_ibv_wc_status(soft.polled.status);
  return 0;
}

// ibv_create_cq_ex(3): after an error from start_poll, end_poll is not
// called, so the batch ends here.
int start_poll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return EINVAL;  // no poll attribute is defined
  std::mutex& iterating = soft_cq_of(cq).iterating;
  iterating.lock();
  const int rc = poll_next(cq);
  if (rc) iterating.unlock();
  return rc;
}

int next_poll(ibv_cq_ex* cq) { return poll_next(cq); }

// Each completion was taken whole by poll_next: nothing to give back.
void end_poll(ibv_cq_ex* cq) { soft_cq_of(cq).iterating.unlock(); }

ibv_wc_opcode read_opcode(ibv_cq_ex* cq) { return to_ibv_wc_opcode(polled(cq).opcode); }
uint32_t read_vendor_err(ibv_cq_ex* cq) { return polled(cq).vendor_err; }
uint32_t read_byte_len(ibv_cq_ex* cq) { return polled(cq).byte_len; }
uint32_t read_qp_num(ibv_cq_ex* cq) { return polled(cq).qp_num; }
uint32_t read_src_qp(ibv_cq_ex* cq) { return polled(cq).src_qp; }
unsigned int read_wc_flags(ibv_cq_ex* cq) { return to_ibv_wc_flags(polled(cq).wc_flags); }
uint32_t read_slid(ibv_cq_ex* cq) { return polled(cq).slid; }
uint8_t read_sl(ibv_cq_ex* cq) { return polled(cq).sl; }
uint8_t read_dlid_path_bits(ibv_cq_ex* cq) { return polled(cq).dlid_path_bits; }
// The HCA clock counts nanoseconds (hca_core_clock = 1 GHz).
uint64_t read_completion_ts(ibv_cq_ex* cq) { return polled(cq).timestamp_ns; }
uint64_t read_completion_wallclock_ns(ibv_cq_ex* cq) { return polled(cq).wallclock_ns; }

// verbs.h reads the invalidated rkey through read_imm_data too: the field
// the completion carries, as ibv_wc's union holds it.
__be32 read_imm_data(ibv_cq_ex* cq) {
  const Completion& c = polled(cq);
  return (c.wc_flags & kWcWithInv) ? c.invalidated_rkey : c.imm_data;
}

void install_poll_functions(ibv_cq_ex& cq) {
  cq.start_poll = start_poll;
  cq.next_poll = next_poll;
  cq.end_poll = end_poll;
  cq.read_opcode = read_opcode;
  cq.read_vendor_err = read_vendor_err;
  cq.read_byte_len = read_byte_len;
  cq.read_imm_data = read_imm_data;
  cq.read_qp_num = read_qp_num;
  cq.read_src_qp = read_src_qp;
  cq.read_wc_flags = read_wc_flags;
  cq.read_slid = read_slid;
  cq.read_sl = read_sl;
  cq.read_dlid_path_bits = read_dlid_path_bits;
  cq.read_completion_ts = read_completion_ts;
  cq.read_completion_wallclock_ns = read_completion_wallclock_ns;
  // Not advertised (kSupportedWcFlags), so never asked for.
  cq.read_cvlan = nullptr;
  cq.read_flow_tag = nullptr;
  cq.read_tm_info = nullptr;
}

}  // namespace

ibv_cq_ex* soft_create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  SoftContext* soft = soft_context(context);
  if (!soft || !attr) {
    errno = EINVAL;
    return nullptr;
  }
  uint32_t stamps = 0;
  if (Errno err = check_create_cq_ex(*attr, soft->hca->attributes().max_cqe,
                                     context->num_comp_vectors, stamps)) {
    errno = err;
    return nullptr;
  }
  // IBV_CQ_INIT_ATTR_MASK_PD: a parent domain of this context, or none.
  SoftPd* parent_domain = nullptr;
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && attr->parent_domain) {
    parent_domain = parent_domain_of(attr->parent_domain);
    if (!parent_domain || attr->parent_domain->context != context) {
      errno = EINVAL;
      return nullptr;
    }
  }
  SoftCq* cq = create_soft_cq(*soft, static_cast<uint32_t>(attr->cqe), attr->cq_context,
                              attr->channel, stamps, parent_domain);
  if (!cq) return nullptr;
  cq->ibv_ex.comp_mask = 0;
  install_poll_functions(cq->ibv_ex);
  return &cq->ibv_ex;
}

int soft_modify_cq(ibv_cq* cq, ibv_modify_cq_attr* attr) {
  if (!cq || !attr) return EINVAL;
  SoftContext* soft = soft_context(cq->context);
  if (!soft) return EINVAL;
  if (Errno err = check_modify_cq(*attr, soft->hca->attributes())) return err;
  if (attr->attr_mask & IBV_CQ_ATTR_MODERATE)
    soft_of<SoftCq>(cq)->cq->set_moderation(attr->moderate.cq_count, attr->moderate.cq_period);
  return 0;
}

}  // namespace softverbs::provider
