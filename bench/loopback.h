// RC QPs connected through their soft device (loopback pairs), public verbs
// API only. The scale and thread programs of the bench use them: no
// connection exchange, as both ends sit on the same port (bench_thread_peers
// connects QPs of two processes so, having told each other the QPNs).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

namespace softverbs::bench {

// Opens the device called `name`; nullptr with `error` set when it can't.
ibv_context* open_device_named(const std::string& name, std::string& error);

// What a QP needs to know to reach a QP on port 1 of `context`.
struct LoopbackPort {
  ibv_port_attr attr{};
  ibv_gid gid{};
  bool query(ibv_context* context, std::string& error);
};

// An RC QP with `depth` send and receive WRs of one SGE each.
ibv_qp* create_rc_qp(ibv_pd* pd, ibv_cq* send_cq, ibv_cq* recv_cq, uint32_t depth, std::string& error);

// Posts one receive of `bytes` at `address` (in the MR of `lkey`).
bool post_one_receive(ibv_qp* qp, void* address, uint32_t bytes, uint32_t lkey, std::string& error);

// RESET -> INIT -> RTR -> RTS towards `remote_qpn` on the same port.
bool connect_loopback(ibv_qp* qp, const LoopbackPort& port, uint32_t remote_qpn, std::string& error);

// Resident set size of this process in KiB, from /proc/self/status.
long resident_kib();

}  // namespace softverbs::bench
