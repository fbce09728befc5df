// Posting chains of work requests: the SGEs of one WR gathered on the
// stack, and the walk down a chain that stops at the first WR refused.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstddef>
#include <new>
#include <span>

#include "emulator/attributes.h"
#include "emulator/types.h"
#include "provider/translate.h"

namespace softverbs::provider {

// Stack room for the SGEs of one WR. Raw bytes rather than Sge[kMaxSge]:
// only the entries a WR uses get written, the rest is never zeroed.
class SgeScratch {
 public:
  // Gathers a WR's SGEs; EINVAL for a count no soft QP can take.
  Errno gather(const ibv_sge* list, int count) {
    if (count < 0 || static_cast<uint32_t>(count) > kMaxSge) return EINVAL;
    if (count > 0 && !list) return EINVAL;
    Sge* sges = data();
    for (int i = 0; i < count; ++i) new (&sges[i]) Sge(from_ibv_sge(list[i]));
    count_ = static_cast<size_t>(count);
    return 0;
  }
  std::span<const Sge> sges() { return {data(), count_}; }

 private:
  Sge* data() { return std::launder(reinterpret_cast<Sge*>(storage_)); }
  alignas(Sge) std::byte storage_[sizeof(Sge) * kMaxSge];
  size_t count_ = 0;
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

// A chain of receive WRs, each handed to `post` as a RecvRequest.
template <class Post>
int post_recv_chain(ibv_recv_wr* wr, ibv_recv_wr** bad_wr, Post&& post) noexcept {
  return post_chain(wr, bad_wr, [&post](const ibv_recv_wr& one) {
    SgeScratch sges;
    if (Errno err = sges.gather(one.sg_list, one.num_sge)) return err;
    RecvRequest request;
    request.wr_id = one.wr_id;
    request.sges = sges.sges();
    return post(request);
  });
}

}  // namespace softverbs::provider
