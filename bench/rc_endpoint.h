// One side of an RC connection for the benchmarks, built with the public
// verbs API only: device, PD, one registered buffer split into a send region
// and a receive region, a send CQ, a receive CQ and an RC QP.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace softverbs::bench {

// What the other side needs to reach this endpoint; sent over the Channel.
struct EndpointAddress {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  uint8_t use_gid = 0;  // no LID on the port (Ethernet link layer)
  uint8_t gid[16] = {};
  uint64_t recv_region = 0;  // where RDMA WRITEs to this endpoint land
  uint32_t rkey = 0;
};

// The device the benchmarks use: SOFTVERBS_BENCH_DEVICE, default softverbs0.
std::string benchmark_device_name();

class RcEndpoint {
 public:
  // Opens port 1 of `device_name` with regions of `region_bytes` each.
  static std::unique_ptr<RcEndpoint> open(const std::string& device_name, std::size_t region_bytes,
                                          std::string& error);
  ~RcEndpoint();
  RcEndpoint(const RcEndpoint&) = delete;
  RcEndpoint& operator=(const RcEndpoint&) = delete;

  EndpointAddress address() const;
  // RESET -> INIT -> RTR -> RTS towards `remote`.
  bool connect(const EndpointAddress& remote, std::string& error);

  uint8_t* send_region() { return buffer_; }
  uint8_t* recv_region() { return buffer_ + region_bytes_; }
  // Work requests the send queue holds; callers keep fewer outstanding.
  static constexpr int kSendQueueDepth = 256;

  // SEND of the first `length` bytes of the send region.
  bool post_send(uint32_t length, bool signaled);
  // RDMA WRITE of the first `length` bytes of the send region to the start
  // of the remote receive region; with `immediate`, an RDMA WRITE with
  // immediate, which takes a receive of the peer's as a SEND does.
  bool post_write(uint32_t length, bool signaled, bool immediate = false);
  // A receive into the receive region.
  bool post_recv(uint32_t length);

  // Retires completions without waiting: their count, or -1 after an error
  // completion (see last_error()).
  int poll_send_cq();
  int poll_recv_cq();

  const std::string& last_error() const { return last_error_; }

 private:
  RcEndpoint() = default;
  int poll(ibv_cq* cq);

  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_cq* send_cq_ = nullptr;
  ibv_cq* recv_cq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  uint8_t* buffer_ = nullptr;
  std::size_t region_bytes_ = 0;
  ibv_port_attr port_{};
  ibv_gid gid_{};
  uint32_t psn_ = 0;
  uint64_t remote_recv_region_ = 0;
  uint32_t remote_rkey_ = 0;
  std::string last_error_;
};

}  // namespace softverbs::bench
