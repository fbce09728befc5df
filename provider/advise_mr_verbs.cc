// ibv_advise_mr(3) on a soft device: prefetch of on-demand MRs. The checks
// come in the kernel's order: flags (EINVAL), an empty SGE list (EINVAL),
// the advice (EOPNOTSUPP for one it does not know), then each SGE (see
// Hca::prefetch_mr for mlx5's errno values).
#include <vector>

#include "provider/exports.h"
#include "provider/soft_context.h"

namespace softverbs::provider {
namespace {

bool prefetch_of(ibv_advise_mr_advice advice, Prefetch& out) {
  switch (advice) {
    case IBV_ADVISE_MR_ADVICE_PREFETCH: out = Prefetch::kRead; return true;
    case IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: out = Prefetch::kWrite; return true;
    case IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT: out = Prefetch::kNoFault; return true;
  }
  return false;
}

int soft_advise_mr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
                   uint32_t num_sge) {
  SoftContext* context = pd ? soft_context(pd->context) : nullptr;
  if (!context || (flags & ~static_cast<uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH))) return EINVAL;
  if (!sg_list || num_sge == 0) return EINVAL;
  Prefetch prefetch;
  if (!prefetch_of(advice, prefetch)) return EOPNOTSUPP;
  return errno_on_exception(
      [&]() -> int {
        std::vector<Sge> sges(num_sge);
        for (uint32_t i = 0; i < num_sge; ++i)
          sges[i] = Sge{sg_list[i].addr, sg_list[i].length, sg_list[i].lkey};
        return context->hca->prefetch_mr(soft_of<SoftPd>(pd)->protection_domain(), sges, prefetch,
                                         flags & IBV_ADVISE_MR_FLAG_FLUSH);
      },
      ENOMEM);
}

}  // namespace

void set_advise_mr_op(verbs_context& vctx) { vctx.advise_mr = soft_advise_mr; }

}  // namespace softverbs::provider
