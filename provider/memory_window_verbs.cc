// Memory windows on a soft device (ibv_alloc_mw(3), ibv_bind_mw(3),
// IBV_WR_BIND_MW and IBV_WR_LOCAL_INV in ibv_post_send(3)): the ops of
// ibv_context behind the inline verbs (send_wr_translation.cc translates a
// bind WR).
// The rules a binding must satisfy are the emulator's (memory_window.h);
// what fails there completes with IBV_WC_MW_BIND_ERR.
#include <atomic>

#include "provider/exports.h"
#include "provider/send_wr_translation.h"
#include "provider/soft_context.h"
#include "provider/translate.h"

namespace softverbs::provider {
namespace {

std::atomic<uint32_t> g_next_mw_handle{1};

ibv_mw* soft_alloc_mw(ibv_pd* pd, ibv_mw_type type) {
  SoftContext* context = pd ? soft_context(pd->context) : nullptr;
  if (!context || (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2)) {
    errno = EINVAL;
    return nullptr;
  }
  return errno_on_exception(
      [&]() -> ibv_mw* {
        std::unique_ptr<SoftMw> mw(new SoftMw{});
        Errno err = 0;
        mw->mw = context->hca->alloc_mw(
            soft_of<SoftPd>(pd)->protection_domain(), type == IBV_MW_TYPE_1 ? MwType::kType1 : MwType::kType2,
            err);
        if (!mw->mw) {
          errno = err ? err : ENOMEM;
          return nullptr;
        }
        mw->ibv.context = pd->context;
        mw->ibv.pd = pd;
        mw->ibv.rkey = mw->mw->initial_rkey();
        mw->ibv.handle = g_next_mw_handle.fetch_add(1);
        mw->ibv.type = type;
        std::lock_guard lock(context->objects.mutex);
        context->objects.mws.insert(mw.get());
        return &mw.release()->ibv;
      },
      static_cast<ibv_mw*>(nullptr));
}

int soft_dealloc_mw(ibv_mw* mw) {
  SoftContext* context = mw ? soft_context(mw->context) : nullptr;
  if (!context) return EINVAL;
  destroy_soft_mw(*context, soft_of<SoftMw>(mw));
  return 0;
}

// ibv_bind_mw(3), type 1 only (its inline code refused the rest): a bind WR
// on the QP's send queue, under the next key byte. The window's rkey is the
// new one once posted; the binding is in force once the WR completes.
int soft_bind_mw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  if (!qp || !mw || !bind || qp->context != mw->context || !is_soft(qp->context)) return EINVAL;
  ibv_send_wr wr{};
  wr.wr_id = bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind->bind_info;
  SendRequest request;
  if (Errno err = from_ibv_send_wr(wr, request)) return err;
  if (Errno err = translate_window_binding(wr, *qp, /*by_verb=*/true, request)) return err;
  if (Errno err = soft_of<SoftQp>(qp)->qp->post_send(request)) return err;
  mw->rkey = wr.bind_mw.rkey;
  return 0;
}

}  // namespace

void destroy_soft_mw(SoftContext& context, SoftMw* mw) {
  {
    std::lock_guard lock(context.objects.mutex);
    context.objects.mws.erase(mw);
  }
  delete mw;
}

void set_memory_window_ops(ibv_context_ops& ops) {
  ops.alloc_mw = soft_alloc_mw;
  ops.bind_mw = soft_bind_mw;
  ops.dealloc_mw = soft_dealloc_mw;
}

}  // namespace softverbs::provider
