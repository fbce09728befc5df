// Data over the QPs the CM tests connect: a registered buffer cut into
// slots, posting receives, SENDs, RDMA WRITEs and UD SENDs, and waiting for
// a completion with a deadline. Plain verbs on the id's PD and CQs.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "conformance/cm/forked_peer.h"

namespace softverbs::conformance::cm {

inline constexpr uint32_t kSlotBytes = 4096;
inline constexpr uint32_t kSlots = 16;
inline constexpr uint32_t kGrhBytes = 40;  // ahead of every UD payload
inline constexpr std::chrono::milliseconds kCompletionTimeout = 10s;

constexpr uint32_t slot_offset(uint32_t slot) { return slot * kSlotBytes; }

// Where a peer's buffer is: what the RC tests carry in private data.
struct RemoteBuffer {
  uint64_t address = 0;
  uint32_t rkey = 0;
  uint32_t length = 0;
};

class RegisteredBuffer {
 public:
  RegisteredBuffer() = default;
  ~RegisteredBuffer();
  RegisteredBuffer(const RegisteredBuffer&) = delete;
  RegisteredBuffer& operator=(const RegisteredBuffer&) = delete;

  // kSlots zeroed slots on `pd`, with local write and remote read and write.
  ::testing::AssertionResult register_on(ibv_pd* pd);
  // Deregisters now (before the id that owns the PD goes).
  void deregister();

  uint8_t* slot(uint32_t index) { return bytes_.data() + slot_offset(index); }
  ibv_mr* mr() const { return mr_; }
  RemoteBuffer remote_slot(uint32_t index) const;

 private:
  std::vector<uint8_t> bytes_;
  ibv_mr* mr_ = nullptr;
};

// rdma_create_qp on `id` (its own QP type, librdmacm's CQs): 16 WRs each
// way, one SGE, every send signalled.
::testing::AssertionResult create_qp(rdma_cm_id* id);

// Receives into slot `slot` (the whole slot), wr_id = slot.
::testing::AssertionResult post_receive(ibv_qp* qp, RegisteredBuffer& buffer, uint32_t slot);
// SEND of `length` bytes of slot `slot`, wr_id = slot.
::testing::AssertionResult post_send(ibv_qp* qp, RegisteredBuffer& buffer, uint32_t slot,
                                     uint32_t length);
// RDMA WRITE of `length` bytes of slot `slot` to `to`, wr_id = slot.
::testing::AssertionResult post_write(ibv_qp* qp, RegisteredBuffer& buffer, uint32_t slot,
                                      uint32_t length, const RemoteBuffer& to);
// UD SEND of `length` bytes of slot `slot` through `ah` to QPN `qpn`.
::testing::AssertionResult post_ud_send(ibv_qp* qp, RegisteredBuffer& buffer, uint32_t slot,
                                        uint32_t length, ibv_ah* ah, uint32_t qpn, uint32_t qkey);

// The next completion on `cq`, which must be a success with `opcode`.
::testing::AssertionResult wait_success(ibv_cq* cq, ibv_wc_opcode opcode, ibv_wc& wc,
                                        std::chrono::milliseconds timeout = kCompletionTimeout);
// The next completion on `cq`, whatever it is.
::testing::AssertionResult wait_completion(ibv_cq* cq, ibv_wc& wc,
                                           std::chrono::milliseconds timeout = kCompletionTimeout);
// Nothing completes on `cq` for `window`.
::testing::AssertionResult no_completion_within(ibv_cq* cq, std::chrono::milliseconds window);

// Bytes seed, seed+1, ... (mod 256).
void fill_pattern(uint8_t* data, size_t length, uint8_t seed);
::testing::AssertionResult has_pattern(const uint8_t* data, size_t length, uint8_t seed);

}  // namespace softverbs::conformance::cm
