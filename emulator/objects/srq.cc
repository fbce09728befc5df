// Shared receive queues: create, post, modify (resize and the limit),
// query, and the take that attached QPs' responders make.
#include <algorithm>
#include <cerrno>

#include "emulator/objects/hca_impl.h"
#include "emulator/objects/qp_impl.h"
#include "emulator/objects/srq_impl.h"

namespace softverbs {

std::unique_ptr<Srq> Hca::create_srq(Pd& pd, SrqInit& init, Errno& err) {
  const DeviceAttributes& a = impl_->attributes;
  if (init.max_wr == 0 || init.max_wr > a.max_srq_wr || init.max_sge > a.max_srq_sge ||
      (init.xrcd && !init.cq)) {
    err = EINVAL;
    return nullptr;
  }
  ObjectQuota::Slot slot = take_slot(ObjectKind::kSrq, err);
  if (!slot) return nullptr;
  auto impl = std::make_unique<Srq::Impl>();
  impl->slot = std::move(slot);
  impl->hca = this;
  impl->pd = &pd;
  impl->xrcd = init.xrcd;
  impl->cq = init.xrcd ? init.cq : nullptr;
  init.max_sge = std::max(init.max_sge, 1u);  // as HCAs round up
  impl->queue.configure(init.max_wr, init.max_sge);
  if (!impl->queue.allocate()) {
    err = ENOMEM;
    return nullptr;
  }
  // ibv_create_srq(3): the limit given at creation is irrelevant; an SRQ
  // starts disarmed.
  init.limit = 0;
  auto srq = std::unique_ptr<Srq>(new Srq(std::move(impl)));
  {
    std::lock_guard lock(impl_->srq_table_mutex);
    uint32_t srqn = impl_->next_srqn++ & 0xffffff;
    while (srqn == 0 || impl_->find_srq_locked(srqn)) srqn = impl_->next_srqn++ & 0xffffff;
    srq->impl().srqn = srqn;
    impl_->srqs_by_number[srqn] = srq.get();
  }
  pd.users.fetch_add(1);
  if (init.xrcd) {
    init.xrcd->users.fetch_add(1);
    init.cq->users.fetch_add(1);
  }
  err = 0;
  return srq;
}

Srq::Srq(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) { impl_->self = this; }

Srq::~Srq() {
  Hca::Impl& hca = impl_->hca->impl();
  {
    std::lock_guard lock(hca.srq_table_mutex);
    hca.srqs_by_number.erase(impl_->srqn);
  }
  {
    std::lock_guard lock(hca.objects_mutex);
    // A target QP in the middle of a message into this SRQ loses it: the
    // message's WQE is gone with the SRQ, as on an HCA.
    if (impl_->xrcd) {
      for (QpImpl* qp : hca.qps) {
        if (qp->type != QpType::kXrcRecv) continue;
        std::lock_guard qp_lock(qp->mutex);
        if (qp->srq == this) qp->responder.leave_xrc_srq();
      }
    }
  }
  impl_->pd->users.fetch_sub(1);
  if (impl_->xrcd) {
    impl_->xrcd->users.fetch_sub(1);
    impl_->cq->users.fetch_sub(1);
  }
}

uint32_t Srq::srqn() const { return impl_->srqn; }

Errno Srq::post_recv(const RecvRequest& wr) {
  std::lock_guard lock(impl_->mutex);
  RecvQueue& q = impl_->queue;
  if (wr.sges.size() > q.max_sge()) return EINVAL;
  if (q.full()) return ENOMEM;
  q.push(wr);
  return 0;
}

Errno Srq::modify(const uint32_t* max_wr, const uint32_t* limit) {
  std::lock_guard lock(impl_->mutex);
  RecvQueue& q = impl_->queue;
  const uint32_t new_max_wr = max_wr ? *max_wr : q.capacity();
  if (max_wr && (new_max_wr == 0 || new_max_wr < q.posted() ||
                 new_max_wr > impl_->hca->attributes().max_srq_wr))
    return EINVAL;
  // The limit (new or armed already) must fit the SRQ.
  if ((limit ? *limit : impl_->limit) > new_max_wr) return EINVAL;
  if (max_wr && new_max_wr != q.capacity()) {
    // The WQEs posted keep their order in the new ring.
    RecvQueue grown;
    grown.configure(new_max_wr, q.max_sge());
    if (!grown.allocate()) return ENOMEM;
    for (uint64_t n = q.head; n != q.tail; ++n) {
      const RecvWqe& w = q.at(n);
      grown.at(grown.tail) = w;
      std::copy_n(q.sges_at(n), w.num_sge, grown.sges_at(grown.tail));
      ++grown.tail;
    }
    q = std::move(grown);
  }
  if (limit) impl_->limit = *limit;
  return 0;
}

Srq::State Srq::query() const {
  std::lock_guard lock(impl_->mutex);
  return State{impl_->queue.capacity(), impl_->queue.max_sge(), impl_->limit};
}

void Srq::Impl::give_back(const ReceiveWqeRef& wqe) {
  std::lock_guard lock(mutex);
  if (queue.full()) return;  // cannot happen: its slot was freed by the take
  --queue.head;
  queue.at(queue.head) = RecvWqe{wqe.wr_id, wqe.num_sge, wqe.length};
  std::copy_n(wqe.sges, wqe.num_sge, queue.sges_at(queue.head));
}

bool Srq::Impl::take(ReceiveWqeRef& out, std::vector<Sge>& sges) {
  bool limit_reached = false;
  {
    std::lock_guard lock(mutex);
    if (queue.empty()) return false;
    const RecvWqe& w = queue.front();
    if (sges.size() < w.num_sge) sges.resize(queue.max_sge());
    std::copy_n(queue.front_sges(), w.num_sge, sges.begin());
    out = ReceiveWqeRef{w.wr_id, w.num_sge, w.length, sges.data()};
    ++queue.head;
    if (limit != 0 && queue.posted() < limit) {
      limit = 0;  // fires once per arming (ibv_modify_srq(3))
      limit_reached = true;
    }
  }
  if (limit_reached) hca->impl().raise(AsyncEvent{AsyncEventType::kSrqLimitReached, nullptr,
                                                  nullptr, 0, self});
  return true;
}

}  // namespace softverbs
