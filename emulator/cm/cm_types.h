// The connection manager's vocabulary as its users see it: IP endpoints,
// the parameters a connection is asked and answered with, the events it
// reports, and what an id knows of its addresses and path.
#pragma once

#include <cstdint>
#include <vector>

#include "emulator/host/host_interfaces.h"
#include "emulator/types.h"

namespace softverbs::cm {

// Where a process's CM agent receives (cm_agent.h): its QPN, and for an
// agent on another host that host's address (a GID no device here owns)
// and the address of ours that reaches it. A connection request to another
// host goes to its QP1 (kGsiQpn) until the listener's agent answers.
struct AgentAddress {
  uint32_t qpn = 0;
  bool off_host = false;
  Gid host{};
  Gid local{};

  bool operator==(const AgentAddress&) const = default;
};

// An IP address (IPv6, or IPv4 as ::ffff:a.b.c.d) and a port.
struct IpEndpoint {
  Gid address{};
  uint16_t port = 0;  // host byte order
  bool ipv4 = true;

  bool operator==(const IpEndpoint&) const = default;
};

bool is_loopback(const IpEndpoint& endpoint);
bool is_multicast(const IpEndpoint& endpoint);

// The RDMA CM's Q_Key for UD ids and multicast (librdmacm's RDMA_UDP_QKEY).
inline constexpr uint32_t kRdmaUdpQkey = 0x01234567;
// The QPN a datagram to a multicast group names.
inline constexpr uint32_t kMulticastQpn = 0xffffff;
bool is_any(const IpEndpoint& endpoint);

// In the order of librdmacm's enum rdma_cm_event_type.
enum class EventType : uint8_t {
  kAddrResolved,
  kAddrError,
  kRouteResolved,
  kRouteError,
  kConnectRequest,
  kConnectResponse,
  kConnectError,
  kUnreachable,
  kRejected,
  kEstablished,
  kDisconnected,
  kDeviceRemoval,
  kMulticastJoin,
  kMulticastError,
  kAddrChange,
  kTimewaitExit,
};

// What a REQ asks or a REP answers, from the receiver's point of view in
// events (responder resources and initiator depth swapped, as the IBTA CM
// reports them).
struct ConnectionParams {
  uint32_t qpn = 0;
  uint32_t qkey = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  bool flow_control = false;
  uint8_t retry_count = 0;
  uint8_t rnr_retry_count = 0;
  bool srq = false;
  std::vector<uint8_t> private_data;
};

struct Event {
  uint32_t id = 0;         // a new id for kConnectRequest
  uint32_t listen_id = 0;  // kConnectRequest: the listener it came to
  EventType type = EventType::kAddrResolved;
  int32_t status = 0;      // negative errno, or a REJ reason
  ConnectionParams params;  // private data at the message's full size
  // UD ids (SIDR, multicast): the event carries an address, not a connection.
  bool datagram = false;
  AddressVector av;
  // kMulticastJoin / kMulticastError: the cookie join_multicast was given.
  uint64_t multicast = 0;
  // kConnectRequest: the new id's QP type, from the request (an XRC
  // initiator's request makes an XRC target).
  QpType qp_type = QpType::kRc;
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void on_cm_event(const Event& event) = 0;
};

// A path record (IBTA 15.2.5.16) as route resolution fills it.
struct PathRecord {
  uint64_t service_id = 0;
  Gid dgid{};
  Gid sgid{};
  uint16_t dlid = 0;
  uint16_t slid = 0;
  uint32_t flow_label = 0;
  uint8_t hop_limit = 0;
  uint8_t traffic_class = 0;
  bool reversible = true;
  uint16_t pkey = 0xffff;
  uint8_t sl = 0;
  Mtu mtu = Mtu::k1024;
  uint8_t rate = 0;
  uint8_t packet_life_time = 0;
};

// What an id knows of where it is: QUERY's answer.
struct IdAddressing {
  bool has_device = false;
  uint32_t device_index = 0;
  IpEndpoint source;
  IpEndpoint destination;
  Gid sgid{};
  Gid dgid{};
  uint16_t pkey = 0xffff;
  uint16_t port_space = 0;
  bool has_path = false;
  PathRecord path;
};

}  // namespace softverbs::cm
