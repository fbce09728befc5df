// A QP's receive queue: a ring of max_recv_wr WQEs with their SGE lists in
// a pool beside it. Indices only grow. Guarded by the QP's lock.
#pragma once

#include <cstdint>
#include <vector>

#include "emulator/types.h"

namespace softverbs {

struct RecvWqe {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  uint64_t length = 0;
};

class RecvQueue {
 public:
  void resize(const QpCapabilities& cap) {
    max_sge_ = cap.max_recv_sge;
    wqes_.assign(cap.max_recv_wr, RecvWqe{});
    sges_.assign(size_t(cap.max_recv_wr) * max_sge_, Sge{});
  }
  bool full() const { return tail - head >= wqes_.size(); }
  bool empty() const { return head == tail; }
  uint64_t posted() const { return tail - head; }

  RecvWqe& front() { return at(head); }
  Sge* front_sges() { return sges_at(head); }
  RecvWqe& at(uint64_t n) { return wqes_[n % wqes_.size()]; }
  Sge* sges_at(uint64_t n) { return &sges_[(n % wqes_.size()) * max_sge_]; }

  uint64_t head = 0;  // oldest posted
  uint64_t tail = 0;  // next free

 private:
  std::vector<RecvWqe> wqes_;
  std::vector<Sge> sges_;
  uint32_t max_sge_ = 0;
};

}  // namespace softverbs
