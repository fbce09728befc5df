#include "provider/send_wr_translation.h"

#include <cstring>
#include <new>
#include <span>

#include "provider/objects.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

Errno gather_inline(const ibv_sge* list, int count, uint8_t* room, size_t& length) {
  const uint64_t total = total_length(list, count);
  if (total > kMaxInlineData) return EINVAL;  // above any QP's max_inline_data
  uint8_t* cursor = room;
  for (int i = 0; i < count; ++i) {
    if (list[i].length == 0) continue;
    std::memcpy(cursor, reinterpret_cast<const void*>(list[i].addr), list[i].length);
    cursor += list[i].length;
  }
  length = static_cast<size_t>(total);
  return 0;
}

}  // namespace

Errno from_ibv_sge_list(const ibv_sge* list, int count, Sge* room) {
  if (count < 0 || static_cast<uint32_t>(count) > kMaxSge) return EINVAL;
  if (count > 0 && !list) return EINVAL;
  for (int i = 0; i < count; ++i) new (&room[i]) Sge(from_ibv_sge(list[i]));
  return 0;
}

uint64_t total_length(const ibv_sge* list, int count) {
  uint64_t total = 0;
  for (int i = 0; i < count; ++i) total += list[i].length;
  return total;
}

namespace {

// The rights a window may grant (ibv_bind_mw(3)); ZERO_BASED is how it is
// addressed, not a right.
constexpr unsigned int kWindowRights =
    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
// A window grants no local access and is no MR: LOCAL_WRITE, MW_BIND and
// RELAXED_ORDERING in a bind mean nothing. Programs written for mlx5 and
// rxe pass them (the MR's own flags), and both bind, so they are accepted
// and ignored; any other bit is refused.
constexpr unsigned int kIgnoredInBind =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING;

Errno translate_datagram_address(const ibv_qp& qp, const ibv_send_wr& wr, SendRequest& out) {
  ibv_ah* ah = wr.wr.ud.ah;
  if (!ah || ah->context != qp.context) return EINVAL;
  out.ah = soft_of<SoftAh>(ah)->ah.get();
  out.remote_qpn = wr.wr.ud.remote_qpn;
  out.remote_qkey = wr.wr.ud.remote_qkey;
  return 0;
}

}  // namespace

Errno translate_window_binding(const ibv_send_wr& wr, const ibv_qp& qp, bool by_verb,
                               SendRequest& out) {
  const ibv_mw* mw = wr.bind_mw.mw;
  const ibv_mw_bind_info& info = wr.bind_mw.bind_info;
  if (!mw || mw->context != qp.context) return EINVAL;
  if (info.mw_access_flags & ~(kWindowRights | IBV_ACCESS_ZERO_BASED | kIgnoredInBind))
    return EINVAL;
  // ibv_bind_mw(3) binds type 1 windows, which are never zero-based (mlx5
  // and rxe refuse it there with EINVAL).
  if (by_verb && (info.mw_access_flags & IBV_ACCESS_ZERO_BASED)) return EINVAL;
  if (info.mr && info.mr->context != qp.context) return EINVAL;
  out.rkey = wr.bind_mw.rkey;
  out.bind.mw = soft_of<SoftMw>(const_cast<ibv_mw*>(mw))->mw.get();
  out.bind.mr_lkey = info.mr ? info.mr->lkey : 0;
  out.bind.addr = info.addr;
  out.bind.length = info.length;
  out.bind.access = qp_access_from_ibv(info.mw_access_flags & kWindowRights);
  out.bind.zero_based = info.mw_access_flags & IBV_ACCESS_ZERO_BASED;
  out.bind.by_verb = by_verb;
  return 0;
}

Errno translate_send_wr(const ibv_send_wr& wr, const SendWrRoom& room, SendRequest& out,
                        const ibv_qp* qp) {
  if (Errno err = from_ibv_send_wr(wr, out)) return err;
  if (qp && qp->qp_type == IBV_QPT_UD) {
    if (Errno err = translate_datagram_address(*qp, wr, out)) return err;
  }
  if (qp && qp->qp_type == IBV_QPT_XRC_SEND) out.xrc_remote_srqn = wr.qp_type.xrc.remote_srqn;
  if (is_local_operation(out.opcode)) {
    // A bind or an invalidation has no SGEs; a bind names its window.
    out.sges = {};
    out.inline_data = {};
    if (out.opcode != WrOpcode::kBindMw) return 0;
    return qp ? translate_window_binding(wr, *qp, /*by_verb=*/false, out) : EINVAL;
  }
  if (Errno err = from_ibv_sge_list(wr.sg_list, wr.num_sge, room.sges)) return err;
  out.sges = std::span<const Sge>(room.sges, static_cast<size_t>(wr.num_sge));
  out.inline_data = {};
  // A READ or atomic keeps its SGEs with the flag: nothing is gathered.
  if ((wr.send_flags & IBV_SEND_INLINE) && takes_inline_data(out.opcode)) {
    size_t length = 0;
    if (Errno err = gather_inline(wr.sg_list, wr.num_sge, room.inline_bytes, length))
      return err;
    out.inline_data = std::span<const uint8_t>(room.inline_bytes, length);
  }
  return 0;
}

}  // namespace softverbs::provider
