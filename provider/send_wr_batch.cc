#include "provider/send_wr_batch.h"

#include <algorithm>
#include <cstring>

#include "emulator/attributes.h"
#include "provider/send_wr_translation.h"
#include "provider/translate.h"

namespace softverbs::provider {

void SendWrBatch::start() {
  region_.lock();
  error_ = 0;
}

void SendWrBatch::end() {
  wrs_.clear();
  sges_.clear();
  inline_bytes_.clear();
  requests_.clear();
  region_.unlock();
}

void SendWrBatch::fail(Errno err) {
  if (!error_) error_ = err;
}

ibv_send_wr& SendWrBatch::add(ibv_wr_opcode opcode, uint64_t wr_id, unsigned int send_flags) {
  PendingWr& pending = wrs_.emplace_back();
  std::memset(&pending.wr, 0, sizeof(pending.wr));
  pending.wr.wr_id = wr_id;
  pending.wr.opcode = opcode;
  pending.wr.send_flags = send_flags;
  return pending.wr;
}

void SendWrBatch::add_atomic_write(uint64_t wr_id, unsigned int send_flags, uint32_t rkey,
                                   uint64_t remote_addr, const void* data) {
  ibv_send_wr& wr = add(IBV_WR_ATOMIC_WRITE, wr_id, send_flags & ~IBV_SEND_INLINE);
  wr.wr.rdma = {remote_addr, rkey};
  PendingWr& pending = wrs_.back();
  if (!data) return fail(EINVAL);
  pending.has_inline_data = true;  // the copy, as the WR's one SGE
  pending.inline_offset = static_cast<uint32_t>(inline_bytes_.size());
  pending.inline_length = sizeof(uint64_t);
  const auto* bytes = static_cast<const uint8_t*>(data);
  inline_bytes_.insert(inline_bytes_.end(), bytes, bytes + sizeof(uint64_t));
}

void SendWrBatch::add_flush(uint64_t wr_id, unsigned int send_flags, uint32_t rkey,
                            uint64_t remote_addr, uint64_t length, uint8_t placement,
                            uint8_t selectivity) {
  add(IBV_WR_RDMA_READ, wr_id, send_flags);  // a placeholder no translation reads
  PendingWr& pending = wrs_.back();
  pending.flush = true;
  SendRequest& r = pending.flush_request;
  r.wr_id = wr_id;
  r.opcode = WrOpcode::kFlush;
  r.flags = send_flags_from_ibv(send_flags & ~IBV_SEND_INLINE);
  r.rkey = rkey;
  r.remote_addr = remote_addr;
  r.flush_placement = placement;
  r.flush_selectivity = selectivity;
  if (length > UINT32_MAX) return fail(EINVAL);  // a RETH's DMA length is 32 bits
  r.flush_length = static_cast<uint32_t>(length);
}

SendWrBatch::PendingWr* SendWrBatch::last() {
  if (wrs_.empty()) {
    fail(EINVAL);  // a setter before any builder
    return nullptr;
  }
  return &wrs_.back();
}

void SendWrBatch::set_sge_list(const ibv_sge* list, size_t count) {
  PendingWr* pending = last();
  if (!pending) return;
  // More than any soft QP takes: refused as ibv_post_send would, without
  // copying an unbounded list.
  if (count > kMaxSge || (count > 0 && !list)) return fail(EINVAL);
  pending->first_sge = static_cast<uint32_t>(sges_.size());
  pending->wr.num_sge = static_cast<int>(count);
  pending->has_inline_data = false;
  sges_.insert(sges_.end(), list, list + count);
}

void SendWrBatch::set_inline_data(const ibv_data_buf* buffers, size_t count) {
  PendingWr* pending = last();
  if (!pending) return;
  if (count > 0 && !buffers) return fail(EINVAL);
  // A READ or atomic has SGEs to receive into; bytes given to it inline
  // name no memory at all.
  WrOpcode opcode;
  if (from_ibv_wr_opcode(pending->wr.opcode, opcode) == 0 && !takes_inline_data(opcode))
    return fail(EINVAL);
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += buffers[i].length;
  if (total > kMaxInlineData) return fail(EINVAL);  // as IBV_SEND_INLINE would be
  pending->has_inline_data = true;
  pending->inline_offset = static_cast<uint32_t>(inline_bytes_.size());
  pending->inline_length = static_cast<uint32_t>(total);
  pending->wr.send_flags |= IBV_SEND_INLINE;
  for (size_t i = 0; i < count; ++i) {
    const auto* bytes = static_cast<const uint8_t*>(buffers[i].addr);
    inline_bytes_.insert(inline_bytes_.end(), bytes, bytes + buffers[i].length);
  }
}

void SendWrBatch::set_ud_addr(ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  PendingWr* pending = last();
  if (!pending) return;
  // Where ibv_post_send's caller puts them; the translation reads them.
  pending->wr.wr.ud.ah = ah;
  pending->wr.wr.ud.remote_qpn = remote_qpn;
  pending->wr.wr.ud.remote_qkey = remote_qkey;
}

void SendWrBatch::set_xrc_srqn(uint32_t remote_srqn) {
  if (PendingWr* pending = last()) pending->wr.qp_type.xrc.remote_srqn = remote_srqn;
}

ibv_send_wr SendWrBatch::view_of(const PendingWr& pending, ibv_sge& inline_sge) const {
  ibv_send_wr wr = pending.wr;
  wr.next = nullptr;
  if (pending.has_inline_data) {
    // The copied bytes, as one SGE an IBV_SEND_INLINE post gathers from.
    inline_sge = {reinterpret_cast<uintptr_t>(inline_bytes_.data() + pending.inline_offset),
                  pending.inline_length, 0};
    wr.sg_list = &inline_sge;
    wr.num_sge = pending.inline_length ? 1 : 0;
  } else {
    wr.sg_list = wr.num_sge > 0 ? const_cast<ibv_sge*>(&sges_[pending.first_sge]) : nullptr;
  }
  return wr;
}

Errno SendWrBatch::translate(std::span<const SendRequest>& requests, const ibv_qp* qp) {
  if (error_) return error_;
  // Room for every WR's SGEs and inline bytes, taken before any is used:
  // the rooms must not move while requests point into them.
  size_t sge_total = 0, inline_total = 0;
  for (const PendingWr& pending : wrs_) {
    ibv_sge inline_sge;
    const ibv_send_wr wr = view_of(pending, inline_sge);
    sge_total += static_cast<size_t>(std::max(wr.num_sge, 0));
    if (wr.send_flags & IBV_SEND_INLINE)
      inline_total += std::min<uint64_t>(total_length(wr.sg_list, wr.num_sge), kMaxInlineData);
  }
  sge_room_.resize(sge_total);
  inline_room_.resize(inline_total);
  requests_.resize(wrs_.size());
  size_t sge_at = 0, inline_at = 0;
  for (size_t i = 0; i < wrs_.size(); ++i) {
    ibv_sge inline_sge;
    const ibv_send_wr wr = view_of(wrs_[i], inline_sge);
    const SendWrRoom room{sge_room_.data() + sge_at, inline_room_.data() + inline_at};
    if (wrs_[i].flush) {
      requests_[i] = wrs_[i].flush_request;
      if (qp && qp->qp_type == IBV_QPT_XRC_SEND)
        requests_[i].xrc_remote_srqn = wr.qp_type.xrc.remote_srqn;
      continue;
    }
    if (Errno err = translate_send_wr(wr, room, requests_[i], qp)) return err;
    sge_at += requests_[i].sges.size();
    inline_at += requests_[i].inline_data.size();
  }
  requests = requests_;
  return 0;
}

}  // namespace softverbs::provider
