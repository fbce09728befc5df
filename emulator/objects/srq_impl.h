// A shared receive queue inside: its ring of WQEs and the limit event.
//
// Threads: guarded by `mutex`, a leaf lock. The responder of an attached QP
// takes it (with the QP's lock held) to claim a WQE; posting takes it alone.
#pragma once

#include <mutex>
#include <vector>

#include "emulator/objects/hca.h"
#include "emulator/transport/receive_wqe.h"
#include "emulator/transport/recv_queue.h"

namespace softverbs {

struct Srq::Impl {
  ObjectQuota::Slot slot;  // its place in the device's SRQ count
  mutable std::mutex mutex;
  Hca* hca = nullptr;
  Pd* pd = nullptr;
  Srq* self = nullptr;
  uint32_t srqn = 0;
  Xrcd* xrcd = nullptr;  // XRC SRQs only, with their CQ
  Cq* cq = nullptr;
  RecvQueue queue;
  uint32_t limit = 0;  // armed while non-zero (IBTA 10.2.9.2)

  // Moves the oldest WQE into `out` (its SGEs into `sges`, which holds
  // max_sge). false when none is posted. Fires the limit event when the
  // WQEs left drop below an armed limit, and disarms it.
  bool take(ReceiveWqeRef& out, std::vector<Sge>& sges);
  // Puts a taken WQE back at the head, first to be taken again: a QP reset
  // or destroyed in the middle of a message did not use it.
  void give_back(const ReceiveWqeRef& wqe);
  uint32_t max_sge() const { return queue.max_sge(); }
};

}  // namespace softverbs
