// A UD QP with its own PD, CQ, buffer and (optionally) SRQ, for the UD,
// multicast and SRQ tests. Plain verbs; each process opens its own.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/testsupport/device.h"
#include "harness/testsupport/verbs_handles.h"

namespace softverbs::conformance {

inline constexpr uint32_t kTestQkey = 0x11111111;
inline constexpr uint32_t kGrhBytes = 40;

// Where a peer's UD QP is: what goes over the test channel.
struct DatagramAddress {
  uint32_t qpn = 0;
  uint16_t lid = 0;
  ibv_gid gid{};
  bool use_grh = false;
  uint8_t gid_index = 0;
};

class DatagramEndpoint {
 public:
  // Opens the test device and brings a UD QP to RTS with `qkey`. With
  // `with_srq`, receives come from a new SRQ of 256 WQEs. Empty error() on
  // success.
  explicit DatagramEndpoint(uint32_t qkey = kTestQkey, bool with_srq = false,
                            uint32_t buffer_bytes = 1 << 20);
  const std::string& error() const { return error_; }

  DatagramAddress address() const;
  uint32_t mtu_bytes() const { return 128u << port_.active_mtu; }
  uint8_t port_num() const { return port_.port; }
  bool on_ethernet() const { return port_.link_layer == IBV_LINK_LAYER_ETHERNET; }
  ibv_context* context() const { return context_.get(); }
  ibv_pd* pd() const { return pd_.get(); }
  ibv_qp* qp() const { return qp_.get(); }
  ibv_srq* srq() const { return srq_; }
  uint8_t* buffer() { return buffer_.data(); }

  // An AH to `to` (its GID through a GRH when `to.use_grh`).
  ibv_ah* make_ah(const DatagramAddress& to);
  // An AH to a multicast group.
  ibv_ah* make_group_ah(const ibv_gid& group, uint16_t mlid);

  int post_recv(uint64_t wr_id, uint64_t offset, uint32_t length);
  int send(ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey, uint64_t wr_id,
           uint64_t offset, uint32_t length, const uint32_t* imm = nullptr);
  // Polls until `count` completions came or `timeout` passed; returns what came.
  std::vector<ibv_wc> poll(size_t count, std::chrono::milliseconds timeout);

  ~DatagramEndpoint();

 private:
  testsupport::ContextPtr context_;
  testsupport::PdPtr pd_;
  testsupport::CqPtr cq_;
  ibv_srq* srq_ = nullptr;
  testsupport::QpPtr qp_;
  std::vector<uint8_t> buffer_;
  testsupport::MrPtr mr_;
  testsupport::PortAddress port_;
  std::vector<ibv_ah*> ahs_;
  std::string error_;
};

}  // namespace softverbs::conformance
