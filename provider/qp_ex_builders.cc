#include "provider/qp_ex_builders.h"

#include <span>

#include "provider/exports.h"
#include "provider/upstream_verbs.h"

namespace softverbs::provider {
namespace {

SoftQp& soft_qp_of(ibv_qp_ex* qpx) { return *soft_of<SoftQp>(&qpx->qp_base); }
SendWrBatch& batch_of(ibv_qp_ex* qpx) { return *soft_qp_of(qpx).send_wr_batch; }

// Starts a WR of `opcode` with the wr_id and wr_flags the caller set just
// before (ibv_wr_post(3)), and lets `fill` set its operation's fields. The
// builders return nothing: a failure is for ibv_wr_complete to report.
template <class Fill>
void build(ibv_qp_ex* qpx, ibv_wr_opcode opcode, Fill&& fill) noexcept {
  SendWrBatch& batch = batch_of(qpx);
  try {
    fill(batch.add(opcode, qpx->wr_id, qpx->wr_flags));
  } catch (...) {
    batch.fail(ENOMEM);
  }
}

template <class Set>
void set(ibv_qp_ex* qpx, Set&& apply) noexcept {
  SendWrBatch& batch = batch_of(qpx);
  try {
    apply(batch);
  } catch (...) {
    batch.fail(ENOMEM);
  }
}

// An operation the QP was not created for, or one no soft QP has.
template <class... Args>
void refuse(ibv_qp_ex* qpx, Args...) {
  batch_of(qpx).fail(EOPNOTSUPP);
}

void wr_send(ibv_qp_ex* qpx) {
  build(qpx, IBV_WR_SEND, [](ibv_send_wr&) {});
}

void wr_send_imm(ibv_qp_ex* qpx, __be32 imm_data) {
  build(qpx, IBV_WR_SEND_WITH_IMM, [&](ibv_send_wr& wr) { wr.imm_data = imm_data; });
}

void wr_send_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  build(qpx, IBV_WR_SEND_WITH_INV,
        [&](ibv_send_wr& wr) { wr.invalidate_rkey = invalidate_rkey; });
}

// A type 2 window bound under `rkey` (ibv_wr_bind_mw(3)); the binding is
// copied, as the caller may reuse it once the builder returns.
void wr_bind_mw(ibv_qp_ex* qpx, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  build(qpx, IBV_WR_BIND_MW, [&](ibv_send_wr& wr) {
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = rkey;
    if (info) wr.bind_mw.bind_info = *info;
  });
}

void wr_local_inv(ibv_qp_ex* qpx, uint32_t invalidate_rkey) {
  build(qpx, IBV_WR_LOCAL_INV, [&](ibv_send_wr& wr) { wr.invalidate_rkey = invalidate_rkey; });
}

void wr_rdma_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  build(qpx, IBV_WR_RDMA_WRITE, [&](ibv_send_wr& wr) { wr.wr.rdma = {remote_addr, rkey}; });
}

void wr_rdma_write_imm(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, __be32 imm_data) {
  build(qpx, IBV_WR_RDMA_WRITE_WITH_IMM, [&](ibv_send_wr& wr) {
    wr.wr.rdma = {remote_addr, rkey};
    wr.imm_data = imm_data;
  });
}

void wr_rdma_read(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr) {
  build(qpx, IBV_WR_RDMA_READ, [&](ibv_send_wr& wr) { wr.wr.rdma = {remote_addr, rkey}; });
}

void wr_atomic_cmp_swp(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t compare,
                       uint64_t swap) {
  build(qpx, IBV_WR_ATOMIC_CMP_AND_SWP,
        [&](ibv_send_wr& wr) { wr.wr.atomic = {remote_addr, compare, swap, rkey}; });
}

void wr_atomic_fetch_add(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, uint64_t add) {
  build(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD,
        [&](ibv_send_wr& wr) { wr.wr.atomic = {remote_addr, add, 0, rkey}; });
}

void wr_atomic_write(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, const void* data) {
  set(qpx, [&](SendWrBatch& batch) {
    batch.add_atomic_write(qpx->wr_id, qpx->wr_flags, rkey, remote_addr, data);
  });
}

void wr_flush(ibv_qp_ex* qpx, uint32_t rkey, uint64_t remote_addr, size_t length, uint8_t type,
              uint8_t level) {
  set(qpx, [&](SendWrBatch& batch) {
    batch.add_flush(qpx->wr_id, qpx->wr_flags, rkey, remote_addr, length, type, level);
  });
}

void wr_set_sge(ibv_qp_ex* qpx, uint32_t lkey, uint64_t addr, uint32_t length) {
  const ibv_sge sge{addr, length, lkey};
  set(qpx, [&](SendWrBatch& batch) { batch.set_sge_list(&sge, 1); });
}

void wr_set_sge_list(ibv_qp_ex* qpx, size_t num_sge, const ibv_sge* sg_list) {
  set(qpx, [&](SendWrBatch& batch) { batch.set_sge_list(sg_list, num_sge); });
}

void wr_set_inline_data(ibv_qp_ex* qpx, void* addr, size_t length) {
  const ibv_data_buf buffer{addr, length};
  set(qpx, [&](SendWrBatch& batch) { batch.set_inline_data(&buffer, 1); });
}

void wr_set_inline_data_list(ibv_qp_ex* qpx, size_t num_buf, const ibv_data_buf* buf_list) {
  set(qpx, [&](SendWrBatch& batch) { batch.set_inline_data(buf_list, num_buf); });
}

void wr_set_ud_addr(ibv_qp_ex* qpx, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) {
  set(qpx, [&](SendWrBatch& batch) { batch.set_ud_addr(ah, remote_qpn, remote_qkey); });
}

void wr_set_xrc_srqn(ibv_qp_ex* qpx, uint32_t remote_srqn) {
  set(qpx, [&](SendWrBatch& batch) { batch.set_xrc_srqn(remote_srqn); });
}

void wr_start(ibv_qp_ex* qpx) {
  batch_of(qpx).start();
}

// Posts the batch whole or not at all; the first error wins.
int wr_complete(ibv_qp_ex* qpx) {
  SoftQp& qp = soft_qp_of(qpx);
  SendWrBatch& batch = *qp.send_wr_batch;
  const Errno err = errno_on_exception(
      [&]() -> Errno {
        std::span<const SendRequest> requests;
        if (Errno e = batch.translate(requests, &qp.ibv)) return e;
        size_t refused = 0;
        return qp.qp->post_send_batch(requests, refused);
      },
      ENOMEM);
  batch.end();
  return err;
}

void wr_abort(ibv_qp_ex* qpx) {
  batch_of(qpx).end();
}

// `builder` when the QP was created for `op`, refuse otherwise.
template <class Fn>
Fn* pick(uint64_t send_ops, uint64_t op, Fn* builder, Fn* refuser) {
  return (send_ops & op) ? builder : refuser;
}

}  // namespace

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
static_assert(offsetof(SoftQp, wr_flush) == kWrFlushOffset,
              "wr_flush must follow struct ibv_qp_ex as in rdma-core 47");
#pragma GCC diagnostic pop

void install_send_wr_builders(SoftQp& qp, uint64_t send_ops) {
  ibv_qp_ex& x = qp.ibv_ex;
  x.comp_mask = 0;
  x.wr_send = pick(send_ops, IBV_QP_EX_WITH_SEND, wr_send, refuse<>);
  x.wr_send_imm = pick(send_ops, IBV_QP_EX_WITH_SEND_WITH_IMM, wr_send_imm, refuse<__be32>);
  x.wr_send_inv = pick(send_ops, IBV_QP_EX_WITH_SEND_WITH_INV, wr_send_inv, refuse<uint32_t>);
  x.wr_rdma_write =
      pick(send_ops, IBV_QP_EX_WITH_RDMA_WRITE, wr_rdma_write, refuse<uint32_t, uint64_t>);
  x.wr_rdma_write_imm = pick(send_ops, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, wr_rdma_write_imm,
                             refuse<uint32_t, uint64_t, __be32>);
  x.wr_rdma_read =
      pick(send_ops, IBV_QP_EX_WITH_RDMA_READ, wr_rdma_read, refuse<uint32_t, uint64_t>);
  x.wr_atomic_cmp_swp = pick(send_ops, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, wr_atomic_cmp_swp,
                             refuse<uint32_t, uint64_t, uint64_t, uint64_t>);
  x.wr_atomic_fetch_add = pick(send_ops, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
                               wr_atomic_fetch_add, refuse<uint32_t, uint64_t, uint64_t>);
  x.wr_bind_mw = pick(send_ops, IBV_QP_EX_WITH_BIND_MW, wr_bind_mw,
                      refuse<ibv_mw*, uint32_t, const ibv_mw_bind_info*>);
  x.wr_local_inv = pick(send_ops, IBV_QP_EX_WITH_LOCAL_INV, wr_local_inv, refuse<uint32_t>);
  // No TSO or atomic write on a soft QP yet.
  x.wr_send_tso = refuse<void*, uint16_t, uint16_t>;
  x.wr_atomic_write = pick(send_ops, IBV_QP_EX_WITH_ATOMIC_WRITE, wr_atomic_write,
                           refuse<uint32_t, uint64_t, const void*>);
  // Past Debian 12's struct ibv_qp_ex, where rdma-core 47 put wr_flush.
  qp.wr_flush = pick(send_ops, kIbvQpExWithFlush, wr_flush,
                     refuse<uint32_t, uint64_t, size_t, uint8_t, uint8_t>);

  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
}

}  // namespace softverbs::provider
