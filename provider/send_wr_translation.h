// One ibv_send_wr as the soft HCA's SendRequest: the translation every send
// WR goes through, whether ibv_post_send was given it or the ibv_wr_*
// builders assembled it (send_wr_batch.h), so a WR means the same either way.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

#include "emulator/attributes.h"
#include "emulator/types.h"

namespace softverbs::provider {

// Where the SGEs and inline bytes of a translated WR live while it is
// posted (SendRequest borrows them): storage the caller owns, left
// uninitialised until written.
struct SendWrRoom {
  Sge* sges = nullptr;             // room for wr.num_sge entries
  uint8_t* inline_bytes = nullptr;  // room for the WR's inline bytes
};

// Translates `wr` into `out`; with IBV_SEND_INLINE the bytes its SGEs name
// are copied now, so the caller may reuse them once the post returns (a
// READ or atomic ignores the flag and keeps its SGEs: takes_inline_data).
// EINVAL for an opcode the soft HCA does not implement, an SGE count above
// kMaxSge (or a list missing), or inline data above kMaxInlineData; `out`
// and the room's contents are then unspecified. For a UD `qp`, the WR's
// wr.ud (address handle, QPN, Q_Key) too: EINVAL without an AH of the QP's
// context.
Errno translate_send_wr(const ibv_send_wr& wr, const SendWrRoom& room, SendRequest& out,
                        const ibv_qp* qp = nullptr);

// The binding of an IBV_WR_BIND_MW WR (or of ibv_bind_mw, `by_verb`) on
// `qp`: EINVAL for a window or MR of another context, or rights a window
// cannot grant (memory_window_verbs.cc).
Errno translate_window_binding(const ibv_send_wr& wr, const ibv_qp& qp, bool by_verb,
                               SendRequest& out);

// Copies an SGE list into `room` (kMaxSge entries). EINVAL for a count no
// soft QP can take, or a list missing.
Errno from_ibv_sge_list(const ibv_sge* list, int count, Sge* room);

// The bytes `count` SGEs name (what IBV_SEND_INLINE copies).
uint64_t total_length(const ibv_sge* list, int count);

}  // namespace softverbs::provider
