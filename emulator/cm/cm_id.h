// One id of the connection manager: where it is bound and resolved to, and
// the state of its connection, with what the handshake needs to resend a
// message and to time out.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "emulator/cm/cm_types.h"
#include "emulator/cm/mad_header.h"

namespace softverbs::cm {

class EventSink;

// The RDMA CM's states of an id (what the consumer did).
enum class IdState : uint8_t {
  kIdle,
  kAddrResolved,
  kRouteResolved,
  kConnect,     // a connection attempt (or a request received) exists
  kDisconnect,  // the connection ended
  kAddrBound,
  kListen,
};

// The IBTA CM's states of the connection (IBTA 12.9.6).
enum class CmState : uint8_t {
  kNone,  // no connection attempt yet
  kIdle,  // refused, timed out, or past timewait
  kReqSent,
  kReqRcvd,
  kRepSent,
  kRepRcvd,
  kEstablished,
  kDreqSent,
  kDreqRcvd,
  kTimewait,
};

struct Id {
  uint32_t handle = 0;
  EventSink* sink = nullptr;
  uint16_t port_space = 0;
  QpType qp_type = QpType::kRc;
  IdState state = IdState::kIdle;
  CmState cm = CmState::kNone;

  bool has_device = false;
  uint32_t device_index = 0;
  IpEndpoint source;
  IpEndpoint destination;
  uint32_t port_handle = 0;  // 0: no port held
  bool has_path = false;
  PathRecord path;

  // Options.
  uint8_t type_of_service = 0;
  uint8_t ack_timeout_option = 0;  // 0: none set
  bool ipv6_only = false;
  bool reuse_address = false;

  // Listener.
  uint32_t backlog_left = 0;
  // Passive connection: the listener whose CONNECT_REQUEST made it.
  uint32_t listen_id = 0;

  // The connection, both sides' view.
  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  AgentAddress remote_agent;  // its CM agent
  uint64_t transaction_id = 0;
  uint32_t psn = 0;  // ours, random, 24 bits
  uint32_t local_qpn = 0;
  uint32_t remote_qpn = 0;
  uint32_t remote_psn = 0;
  uint8_t responder_resources = 0;  // what our QP serves
  uint8_t initiator_depth = 0;      // what our QP issues
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t local_ack_timeout = 19;
  bool srq = false;
  bool flow_control = false;

  // The message that awaits a reply (REQ, REP, DREQ), resent on timeout.
  std::array<uint8_t, kMadBytes> last_sent{};
  bool has_last_sent = false;
  bool awaiting_reply = false;
  uint64_t deadline_ns = 0;    // of the reply, or of timewait
  uint64_t timeout_ns = 0;
  uint32_t retries_left = 0;
  // A request whose listener is not there yet looks again this many times.
  uint32_t listener_lookups_left = 0;
};

// A request's private data (a REQ's or SIDR_REQ's): the RDMA CM's IP
// header for this id, then the consumer's bytes (cm_handshake.cc).
void write_request_private_data(const Id& id, std::span<const uint8_t> consumer_data,
                                std::span<uint8_t> out);

// A starting PSN: random, as the kernel's CM picks one per id.
uint32_t random_psn();

}  // namespace softverbs::cm
