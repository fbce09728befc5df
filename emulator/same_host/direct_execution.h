// The initiator's side of an RDMA WRITE, READ or atomic executed directly
// on a target process of the same host, as an HCA executes it without the
// target's CPU: the initiator finds the target QP and the R_Key's MR in the
// target's table (target_table_layout.h), makes the responder's checks
// (the QP is open to it, the PSN is the one expected, the QP and the MR
// grant the access, the PD matches, the range lies inside the MR, an
// atomic's word is aligned), moves the bytes with one process_vm_writev or
// process_vm_readv (a memcpy when the target is the initiator's own
// process, or when the MR's pages are shared: shared_pages.h,
// peer_pages.h), or runs the atomic as the processor's atomic instruction
// on the word (only where it is mapped here: no system call is atomic,
// and the target's responder and CPU use the same instructions), and advances
// the responder's PSN and MSN past the message, all under the entries'
// locks. Anything that does not check out leaves the table as it was, and
// the operation travels as packets instead, where the responder gives the
// exact answer (NAK, error) a failure deserves.
#pragma once

#include <cstdint>
#include <span>

#include "emulator/same_host/run_frame.h"

namespace softverbs {

enum class DirectKind : uint8_t {
  kWrite,        // local -> target
  kRead,         // target -> local
  kCompareSwap,  // the target's aligned word, `original` its former value
  kFetchAdd,
  kAtomicWrite,  // the target's aligned word takes `compare_add` whole
};

struct DirectOperation {
  DirectKind kind = DirectKind::kWrite;
  uint32_t initiator_key = 0;  // target_qp_key() of the initiating QP
  uint32_t device_index = 0;   // the target QP
  uint32_t qpn = 0;
  uint32_t psn = 0;          // the message's first PSN
  uint32_t packets = 0;      // PSNs it takes
  uint32_t rkey = 0;
  uint64_t va = 0;
  uint64_t length = 0;
  // This process's memory the bytes come from (WRITE) or go to (READ);
  // none for an atomic.
  std::span<const RunPiece> local;
  // An atomic's operands (the value of an ATOMIC WRITE in compare_add),
  // and where a compare-and-swap or fetch-and-add leaves the word's
  // former value.
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  uint64_t* original = nullptr;
  // The target is this process (PeerTargetArea::same_process): the bytes
  // move with a guarded memcpy instead of a system call.
  bool same_process = false;
  // A WRITE with immediate: the bytes only. The responder takes the
  // message (its PSNs, a receive WQE, the completion) from the run frame
  // the requester sends next (run_frame.h, `placed`), so the entry's PSN
  // and MSN stay.
  bool place_only = false;
  // Only if the bytes move without a system call (a short one, for which
  // a packet costs less than the call; always an atomic): else
  // kNeedsSystemCall.
  bool only_without_system_call = false;

  bool is_atomic() const { return kind >= DirectKind::kCompareSwap; }
  bool reads_target() const { return kind == DirectKind::kRead; }
};

enum class DirectResult {
  kExecuted,
  kNotHere,           // send it as packets
  kRefused,           // the kernel refuses cross-memory attach here: send every one as packets
  kNeedsSystemCall,   // nothing done: only a system call would reach the MR
  kNotYet,            // nothing done: SENDs placed before it are not taken yet
                      // (placed_send.h); send it as packets, which follow them
};

// `area` is the target's (SameHost::direct_target).
DirectResult execute_directly(std::span<uint8_t> area, const DirectOperation& op);

}  // namespace softverbs
