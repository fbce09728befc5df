// Fixture for single-process tests: opens the device under test and knows
// its attributes and how port 1 is addressed.
#pragma once

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>

#include "harness/testsupport/device.h"
#include "harness/testsupport/errors.h"
#include "harness/testsupport/rc_connection.h"
#include "harness/testsupport/verbs_handles.h"

namespace softverbs::conformance {

using namespace softverbs::testsupport;

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override;

  ibv_context* context() const { return context_.get(); }
  const ibv_device_attr& device_attr() const { return device_attr_; }
  const PortAddress& port() const { return port_; }

  // Null on failure, with the errno in `last_error_`.
  PdPtr alloc_pd();
  CqPtr create_cq(int cqe = 256, ibv_comp_channel* channel = nullptr,
                  void* cq_context = nullptr);
  QpPtr create_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq,
                  const ibv_qp_cap& cap = small_qp_cap(), bool sq_sig_all = false,
                  ibv_qp_cap* granted = nullptr);

  static ibv_qp_cap small_qp_cap() { return {16, 16, 1, 1, 0}; }

  // Connects `a` and `b` (same context) to each other, RESET -> RTS.
  Errno connect_pair(ibv_qp* a, ibv_qp* b, const RcParameters& params = {});

  Errno last_error_ = 0;

 private:
  ContextPtr context_;  // declared first: closed after everything else
  ibv_device_attr device_attr_{};
  PortAddress port_{};
};

}  // namespace softverbs::conformance
