// Owning handles for verbs objects: each releases its object with the
// matching destroy verb. Destroy in the reverse order of creation (QPs before
// their CQs and PD, MRs before their PD); a handle's get() can be passed to
// any verb, and release() hands ownership back when a test destroys the
// object itself to check the verb's return value.
#pragma once

#include <infiniband/verbs.h>

#include <memory>

namespace softverbs::testsupport {

struct ContextCloser {
  void operator()(ibv_context* context) const noexcept { ibv_close_device(context); }
};
struct PdDeallocator {
  void operator()(ibv_pd* pd) const noexcept { ibv_dealloc_pd(pd); }
};
struct MrDeregisterer {
  void operator()(ibv_mr* mr) const noexcept { ibv_dereg_mr(mr); }
};
struct CqDestroyer {
  void operator()(ibv_cq* cq) const noexcept { ibv_destroy_cq(cq); }
};
struct CompChannelDestroyer {
  void operator()(ibv_comp_channel* channel) const noexcept {
    ibv_destroy_comp_channel(channel);
  }
};
struct TdDeallocator {
  void operator()(ibv_td* td) const noexcept { ibv_dealloc_td(td); }
};
struct QpDestroyer {
  void operator()(ibv_qp* qp) const noexcept { ibv_destroy_qp(qp); }
};

using ContextPtr = std::unique_ptr<ibv_context, ContextCloser>;
using PdPtr = std::unique_ptr<ibv_pd, PdDeallocator>;
using MrPtr = std::unique_ptr<ibv_mr, MrDeregisterer>;
using CqPtr = std::unique_ptr<ibv_cq, CqDestroyer>;
using CompChannelPtr = std::unique_ptr<ibv_comp_channel, CompChannelDestroyer>;
using QpPtr = std::unique_ptr<ibv_qp, QpDestroyer>;
using TdPtr = std::unique_ptr<ibv_td, TdDeallocator>;

}  // namespace softverbs::testsupport
