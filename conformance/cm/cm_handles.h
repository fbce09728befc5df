// Owning handles for librdmacm and verbs objects, so that a failed
// assertion anywhere in a test still tears down in the right order. A test
// declares them in creation order (channel, id, then what lives on the id's
// PD) so that they are destroyed in reverse.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <memory>

namespace softverbs::conformance::cm {

struct ChannelDeleter {
  void operator()(rdma_event_channel* channel) const { rdma_destroy_event_channel(channel); }
};
using Channel = std::unique_ptr<rdma_event_channel, ChannelDeleter>;

// Destroys the id's QP first (rdma_destroy_qp, which also destroys the CQs
// librdmacm made for it), then the id.
struct IdDeleter {
  void operator()(rdma_cm_id* id) const;
};
using CmId = std::unique_ptr<rdma_cm_id, IdDeleter>;

struct AhDeleter {
  void operator()(ibv_ah* ah) const { ibv_destroy_ah(ah); }
};
using AddressHandle = std::unique_ptr<ibv_ah, AhDeleter>;

// A new event channel; null (with a recorded failure) if it cannot be made.
Channel make_channel();
// A new id on `channel` (null: a synchronous id) in port space `ps`.
CmId make_id(rdma_event_channel* channel, rdma_port_space ps, void* context = nullptr);

// The id's QP state as ibv_query_qp reports it, or -1 if it cannot.
int qp_state(const rdma_cm_id* id);

}  // namespace softverbs::conformance::cm
