// The responder of an XRC target QP (IBTA 9.8.4, 11.2.4): it has no receive
// queue, PD or CQ of its own. Each message goes to the XRC SRQ its packets
// name in the XRCETH, and takes from that SRQ the receive WQE, the PD that
// guards memory and the CQ of the completion, provided the SRQ belongs to
// the target's XRC domain.
#include "emulator/objects/qp_impl.h"
#include "emulator/objects/srq_impl.h"
#include "emulator/transport/responder.h"

namespace softverbs {

bool Responder::enter_xrc_srq(uint32_t srqn) {
  if (qp_.srq && qp_.srq->srqn() == srqn) return true;
  // A message in progress keeps its SRQ to its end.
  if (recv_in_progress_ || write_in_progress_) return false;
  Hca::Impl& hca = qp_.hca->impl();
  Srq* srq = nullptr;
  {
    std::lock_guard lock(hca.srq_table_mutex);
    srq = hca.find_srq_locked(srqn);
  }
  // Not found, not XRC, or another domain's: the SRQ's destructor cannot
  // free it meanwhile, as it waits for this QP's lock (srq.cc).
  if (!srq || srq->impl().xrcd != qp_.xrcd) return false;
  release_receive();
  qp_.srq = srq;
  qp_.pd = srq->impl().pd;
  qp_.recv_cq = srq->impl().cq;
  return true;
}

void Responder::leave_xrc_srq() {
  // The WQE held is not given back: its SRQ is going away.
  holds_receive_ = false;
  recv_in_progress_ = write_in_progress_ = false;
  qp_.srq = nullptr;
  qp_.pd = nullptr;
  qp_.recv_cq = nullptr;
}

}  // namespace softverbs
