#include "conformance/cm/cm_handles.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

namespace softverbs::conformance::cm {

void IdDeleter::operator()(rdma_cm_id* id) const {
  if (id->qp != nullptr) rdma_destroy_qp(id);
  rdma_destroy_id(id);
}

Channel make_channel() {
  Channel channel(rdma_create_event_channel());
  if (!channel) ADD_FAILURE() << "rdma_create_event_channel: " << strerror(errno);
  return channel;
}

CmId make_id(rdma_event_channel* channel, rdma_port_space ps, void* context) {
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(channel, &id, context, ps) != 0) {
    ADD_FAILURE() << "rdma_create_id: " << strerror(errno);
    return nullptr;
  }
  return CmId(id);
}

int qp_state(const rdma_cm_id* id) {
  if (id->qp == nullptr) return -1;
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (ibv_query_qp(id->qp, &attr, IBV_QP_STATE, &init) != 0) return -1;
  return attr.qp_state;
}

}  // namespace softverbs::conformance::cm
