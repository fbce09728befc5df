// Posting chains of work requests: stack room for one WR, the walk down a
// chain that stops at the first WR refused, and receive WRs turned into
// RecvRequests.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <new>
#include <span>

#include "emulator/attributes.h"
#include "emulator/types.h"
#include "provider/send_wr_translation.h"

namespace softverbs::provider {

// Stack room for the SGEs and inline bytes of one WR. Raw bytes rather than
// Sge[kMaxSge]: only the entries a WR uses get written, the rest is never
// zeroed.
class StackRoom {
 public:
  SendWrRoom room() { return {sges(), inline_bytes_.data()}; }
  Sge* sges() { return std::launder(reinterpret_cast<Sge*>(sge_storage_)); }

 private:
  alignas(Sge) std::byte sge_storage_[sizeof(Sge) * kMaxSge];
  std::array<uint8_t, kMaxInlineData> inline_bytes_;  // left uninitialised
};

// Posts a chain of WRs; the first one refused ends the chain, names itself
// in *bad_wr and gives its errno. Exceptions (allocation failure inside the
// HCA) count as ENOMEM: the caller is C.
template <class Wr, class PostOne>
int post_chain(Wr* wr, Wr** bad_wr, PostOne&& post_one) noexcept {
  Errno err = 0;
  try {
    for (; wr; wr = wr->next)
      if ((err = post_one(*wr))) break;
  } catch (...) {
    err = ENOMEM;
  }
  if (err && bad_wr) *bad_wr = wr;
  return err;
}

// A chain of receive WRs (a QP's or an SRQ's), each handed to `post` as a
// RecvRequest whose SGEs live on the stack for the call.
template <class Post>
int post_recv_chain(ibv_recv_wr* wr, ibv_recv_wr** bad_wr, Post&& post) noexcept {
  return post_chain(wr, bad_wr, [&post](const ibv_recv_wr& one) -> Errno {
    StackRoom stack;
    Sge* sges = stack.sges();
    if (Errno err = from_ibv_sge_list(one.sg_list, one.num_sge, sges)) return err;
    RecvRequest request;
    request.wr_id = one.wr_id;
    request.sges = std::span<const Sge>(sges, static_cast<size_t>(one.num_sge));
    return post(request);
  });
}

}  // namespace softverbs::provider
