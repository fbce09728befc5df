// A QP's send queue: a ring of max_send_wr WQEs, with their SGE lists and
// inline bytes in pools beside it (no allocation per post). Indices only
// grow; a WQE lives at index % capacity. The ring's memory is taken at the
// first post, so a QP that never sends costs none (65,536 idle QPs fit in
// little memory). Guarded by the QP's lock.
//
//   head <= next <= tail
//   [head, next)  handed to the wire, waiting for acknowledgement or responses
//   [next, tail)  posted, not (or, after a go-back-N, not again) transmitted
#pragma once

#include <cstdint>
#include <new>
#include <vector>

#include "emulator/types.h"

namespace softverbs {

// Where a UD WQE goes, copied from its address handle at post time (the
// application may destroy the AH once ibv_post_send returns).
struct DatagramDestination {
  AddressVector av;
  uint32_t device_index = 0;
  uint32_t qpn = 0;
  uint32_t qkey = 0;
  bool multicast = false;
};

struct SendWqe {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  uint32_t flags = 0;  // WrFlags
  uint32_t imm_data = 0;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  uint32_t num_sge = 0;
  uint32_t inline_len = 0;
  uint64_t length = 0;
  uint32_t first_psn = 0;  // assigned when first transmitted
  uint32_t last_psn = 0;
  uint32_t next_response_psn = 0;  // READ: the first response PSN not yet arrived
  uint32_t read_stream_end = 0;    // READ: the last response PSN the latest request asked for
  bool started = false;
  bool done = false;
  WcStatus status = WcStatus::kSuccess;
  DatagramDestination ud;  // UD only
  uint32_t xrc_remote_srqn = 0;  // XRC initiator only
  uint64_t atomic_write_data = 0;  // kAtomicWrite (SendRequest says how)
  uint8_t flush_placement = 0;     // kFlush
  uint8_t flush_selectivity = 0;
  uint32_t flush_length = 0;
  // kBindMw: the binding asked for, `rkey` the window's new R_Key. The
  // window is named by its index: it may be gone when the WR executes.
  struct WindowBinding {
    uint32_t mw_index = 0;
    uint32_t mr_lkey = 0;
    uint32_t access = 0;
    uint64_t addr = 0;
    uint64_t length = 0;
    bool zero_based = false;
    bool by_verb = false;
  } bind;

  // A FLUSH is answered as a READ of nothing, and ordered like one.
  bool is_read() const { return opcode == WrOpcode::kRdmaRead || opcode == WrOpcode::kFlush; }
  bool is_atomic() const {
    return opcode == WrOpcode::kAtomicCmpSwp || opcode == WrOpcode::kAtomicFetchAdd;
  }
  // READs and atomics are answered with data and count against max_rd_atomic.
  bool is_rd_atomic() const { return is_read() || is_atomic(); }
  bool is_local() const { return is_local_operation(opcode); }
  bool is_send() const {
    return opcode == WrOpcode::kSend || opcode == WrOpcode::kSendWithImm ||
           opcode == WrOpcode::kSendWithInv;
  }
};

class SendQueue {
 public:
  void resize(const QpCapabilities& cap) {
    capacity_ = cap.max_send_wr;
    max_sge_ = cap.max_send_sge;
    max_inline_ = cap.max_inline_data;
  }
  // Takes the ring's memory if not done yet. false when there is none.
  bool allocate() {
    if (!wqes_.empty()) return true;
    try {
      wqes_.assign(capacity_, SendWqe{});
      sges_.assign(size_t(capacity_) * max_sge_, Sge{});
      inline_.assign(size_t(capacity_) * max_inline_, 0);
    } catch (const std::bad_alloc&) {
      wqes_.clear();
      return false;
    }
    return true;
  }
  uint32_t capacity() const { return capacity_; }
  bool full() const { return tail - head >= capacity_; }
  bool empty() const { return head == tail; }

  SendWqe& at(uint64_t n) { return wqes_[n % wqes_.size()]; }
  const SendWqe& at(uint64_t n) const { return wqes_[n % wqes_.size()]; }
  Sge* sges_at(uint64_t n) { return &sges_[(n % wqes_.size()) * max_sge_]; }
  uint8_t* inline_at(uint64_t n) { return inline_.data() + (n % wqes_.size()) * max_inline_; }

  // The oldest WQE not done, or tail when every WQE is done.
  uint64_t oldest_incomplete() const {
    uint64_t n = head;
    while (n != tail && at(n).done) ++n;
    return n;
  }

  uint64_t head = 0;  // oldest not yet completed
  uint64_t next = 0;  // next to (re)transmit
  uint64_t tail = 0;  // next free

 private:
  std::vector<SendWqe> wqes_;
  std::vector<Sge> sges_;
  std::vector<uint8_t> inline_;
  uint32_t capacity_ = 0;
  uint32_t max_sge_ = 0;
  uint32_t max_inline_ = 0;
};

}  // namespace softverbs
