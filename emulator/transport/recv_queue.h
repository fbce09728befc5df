// A receive queue: a ring of WQEs with their SGE lists in a pool beside it.
// Indices only grow. The memory is taken by allocate() (a QP's at its first
// post; an SRQ's when made). Guarded by its owner's lock: the QP's, or the
// SRQ's.
#pragma once

#include <cstdint>
#include <new>
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
  void resize(const QpCapabilities& cap) { configure(cap.max_recv_wr, cap.max_recv_sge); }
  void configure(uint32_t capacity, uint32_t max_sge) {
    capacity_ = capacity;
    max_sge_ = max_sge;
  }
  uint32_t capacity() const { return capacity_; }
  uint32_t max_sge() const { return max_sge_; }
  // Writes a WQE at the tail (room checked by the caller).
  void push(const RecvRequest& wr) {
    RecvWqe& r = at(tail);
    r.wr_id = wr.wr_id;
    r.num_sge = static_cast<uint32_t>(wr.sges.size());
    r.length = 0;
    for (const Sge& s : wr.sges) r.length += s.length;
    Sge* to = sges_at(tail);
    for (const Sge& s : wr.sges) *to++ = s;
    ++tail;
  }
  // Takes the ring's memory if not done yet. false when there is none.
  bool allocate() {
    if (!wqes_.empty()) return true;
    try {
      wqes_.assign(capacity_, RecvWqe{});
      sges_.assign(size_t(capacity_) * max_sge_, Sge{});
    } catch (const std::bad_alloc&) {
      wqes_.clear();
      return false;
    }
    return true;
  }
  bool full() const { return tail - head >= capacity_; }
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
  uint32_t capacity_ = 0;
  uint32_t max_sge_ = 0;
};

}  // namespace softverbs
