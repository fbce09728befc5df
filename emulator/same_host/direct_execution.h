// The initiator's side of an RDMA WRITE or READ executed directly on a
// target process of the same host, as an HCA executes it without the
// target's CPU: the initiator finds the target QP and the R_Key's MR in the
// target's table (target_table_layout.h), makes the responder's checks
// (the QP is open to it, the PSN is the one expected, the QP and the MR
// grant the access, the PD matches, the range lies inside the MR), moves
// the bytes with one process_vm_writev or process_vm_readv (a memcpy when
// the target is the initiator's own process, or when the MR's pages are
// shared: shared_pages.h, peer_pages.h), and advances
// the responder's PSN and MSN past the message, all under the entries'
// locks. Anything that does not check out leaves the table as it was, and
// the operation travels as packets instead, where the responder gives the
// exact answer (NAK, error) a failure deserves.
#pragma once

#include <cstdint>
#include <span>

#include "emulator/same_host/run_frame.h"

namespace softverbs {

struct DirectOperation {
  bool read = false;         // READ: target -> local; else WRITE
  uint32_t initiator_key = 0;  // target_qp_key() of the initiating QP
  uint32_t device_index = 0;   // the target QP
  uint32_t qpn = 0;
  uint32_t psn = 0;          // the message's first PSN
  uint32_t packets = 0;      // PSNs it takes
  uint32_t rkey = 0;
  uint64_t va = 0;
  uint64_t length = 0;
  // This process's memory the bytes come from (WRITE) or go to (READ).
  std::span<const RunPiece> local;
  // The target is this process (PeerTargetArea::same_process): the bytes
  // move with a guarded memcpy instead of a system call.
  bool same_process = false;
  // Only if the bytes move without a system call (a short one, for which
  // a packet costs less than the call): else kNeedsSystemCall.
  bool only_without_system_call = false;
};

enum class DirectResult {
  kExecuted,
  kNotHere,           // send it as packets
  kRefused,           // the kernel refuses cross-memory attach here: send every one as packets
  kNeedsSystemCall,   // nothing done: only a system call would move the bytes
};

// `area` is the target's (SameHost::direct_target).
DirectResult execute_directly(std::span<uint8_t> area, const DirectOperation& op);

}  // namespace softverbs
