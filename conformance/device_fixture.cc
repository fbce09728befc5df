#include "conformance/device_fixture.h"

#include <cerrno>

#include "harness/testsupport/test_config.h"

namespace softverbs::conformance {

void DeviceTest::SetUp() {
  const std::string& name = test_config().device_name;
  ASSERT_FALSE(name.empty()) << "no RDMA device found; pass --device=NAME or set "
                                "SOFTVERBS_TEST_DEVICE (under softverbs: LD_PRELOAD it)";
  Errno err = 0;
  context_ = open_device(name, err);
  ASSERT_TRUE(context_) << "cannot open " << name << ": " << describe_errno(err);
  ASSERT_EQ(0, ibv_query_device(context(), &device_attr_));
  ASSERT_EQ(0, query_test_port_address(context(), port_));
}

PdPtr DeviceTest::alloc_pd() {
  errno = 0;
  PdPtr pd(ibv_alloc_pd(context()));
  last_error_ = pd ? 0 : errno;
  return pd;
}

CqPtr DeviceTest::create_cq(int cqe, ibv_comp_channel* channel, void* cq_context) {
  errno = 0;
  CqPtr cq(ibv_create_cq(context(), cqe, cq_context, channel, 0));
  last_error_ = cq ? 0 : errno;
  return cq;
}

QpPtr DeviceTest::create_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq,
                            const ibv_qp_cap& cap, bool sq_sig_all, ibv_qp_cap* granted) {
  return create_rc_qp(pd, send_cq, recv_cq, cap, sq_sig_all, last_error_, granted);
}

Errno DeviceTest::connect_pair(ibv_qp* a, ibv_qp* b, const RcParameters& params) {
  return connect_rc_pair(a, b, port_, params);
}

}  // namespace softverbs::conformance
