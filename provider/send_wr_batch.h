// The send WRs an application builds with the ibv_wr_* builders between
// ibv_wr_start and ibv_wr_complete / ibv_wr_abort (ibv_wr_post(3)), held as
// the ibv_send_wr list ibv_post_send would have been given: each WR with
// copies of its SGE list and inline bytes, since the caller may reuse those
// as soon as a builder returns. At completion every WR goes through the
// same translate_send_wr as ibv_post_send's, and the batch is posted whole
// or not at all (ibv_wr_post(3): a failure aborts the entire posting).
//
// Threads: ibv_wr_post(3) makes start..complete/abort a per-QP critical
// region the provider locks: start() takes the lock and end() releases it;
// the builders run inside the region, by one thread.
//
// Memory: the vectors are kept from one batch to the next, so once they
// have grown to the batches a program builds nothing more is allocated.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "emulator/types.h"

namespace softverbs::provider {

class SendWrBatch {
 public:
  // Opens the critical region with an empty batch.
  void start();
  // Forgets the batch and closes the critical region (abort, or after the
  // batch was posted).
  void end();

  // --- builders: each starts a WR; the caller fills its opcode's fields
  // (wr.rdma, wr.atomic, imm_data / invalidate_rkey) in the returned WR.
  ibv_send_wr& add(ibv_wr_opcode opcode, uint64_t wr_id, unsigned int send_flags);
  // An ATOMIC WRITE of the 8 bytes at `data`, copied now: the WR carries
  // them as its one SGE, as ibv_post_send takes them.
  void add_atomic_write(uint64_t wr_id, unsigned int send_flags, uint32_t rkey,
                        uint64_t remote_addr, const void* data);
  // A FLUSH (ibv_wr_flush), which no ibv_send_wr can express.
  void add_flush(uint64_t wr_id, unsigned int send_flags, uint32_t rkey, uint64_t remote_addr,
                 uint64_t length, uint8_t placement, uint8_t selectivity);

  // --- setters: they apply to the last WR added (EINVAL without one).
  void set_sge_list(const ibv_sge* list, size_t count);
  void set_inline_data(const ibv_data_buf* buffers, size_t count);
  void set_ud_addr(ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey);
  void set_xrc_srqn(uint32_t remote_srqn);

  // Makes complete() fail with `err` (the first error recorded wins).
  void fail(Errno err);

  // Translates every WR into `requests` (valid until end()). Returns the
  // first error recorded by a builder or setter, else the first WR's that
  // the translation refuses; nothing is to be posted then.
  Errno translate(std::span<const SendRequest>& requests, const ibv_qp* qp = nullptr);

  size_t size() const { return wrs_.size(); }

 private:
  struct PendingWr {
    ibv_send_wr wr;        // sg_list is set at translation, from first_sge
    uint32_t first_sge = 0;
    bool has_inline_data = false;  // set_inline_data: inline_offset/length
    uint32_t inline_offset = 0;
    uint32_t inline_length = 0;
    bool flush = false;  // add_flush: the rest of the WR is in `flush_request`
    SendRequest flush_request;
  };
  PendingWr* last();  // nullptr (and EINVAL recorded) without a WR
  // The WR as ibv_post_send would take it, its SGEs valid while the batch is.
  ibv_send_wr view_of(const PendingWr& pending, ibv_sge& inline_sge) const;

  std::mutex region_;
  Errno error_ = 0;
  std::vector<PendingWr> wrs_;
  std::vector<ibv_sge> sges_;
  std::vector<uint8_t> inline_bytes_;
  // Filled by translate(): what the HCA is given.
  std::vector<SendRequest> requests_;
  std::vector<Sge> sge_room_;
  std::vector<uint8_t> inline_room_;
};

}  // namespace softverbs::provider
