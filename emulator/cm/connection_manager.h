// The connection manager of one process: the RDMA CM's ids (addresses,
// routes, listeners, connections) on soft devices, and the IBTA CM
// handshake (REQ/REP/RTU, REJ, DREQ/DREP, timewait) carried as MADs
// between the processes' CM agents (cm_agent.h). It knows IP addresses,
// port spaces and QP attributes, not the verbs ABI nor librdmacm's: the
// provider's rdma_cm file (provider/rdmacm/) translates its commands into
// these calls and these events into its own.
//
// Threads: every method may be called from any thread. Events are handed
// to an id's EventSink with the manager's lock held, from the caller's
// thread or the agent's: a sink must only queue them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "emulator/cm/cm_types.h"
#include "emulator/host/cm_port_directory.h"
#include "emulator/types.h"

namespace softverbs {
class Engine;
}

namespace softverbs::cm {

class CmAgent;
struct CmMad;
struct Id;
struct ReqMessage;
struct RepMessage;
struct RejMessage;
struct SidrReqMessage;
struct SidrRepMessage;

class ConnectionManager {
 public:
  // The process's manager on the process's engine and registry, made on
  // first use. nullptr + err when the engine cannot be had.
  static ConnectionManager* process(Errno& err);
  ConnectionManager(Engine& engine, CmPortDirectory& ports);
  ~ConnectionManager();
  ConnectionManager(const ConnectionManager&) = delete;
  ConnectionManager& operator=(const ConnectionManager&) = delete;

  // Stops the agent for good (the engine is going): later commands that
  // need it fail with ENODEV and nothing more is sent.
  void shut_down();

  uint32_t create_id(EventSink& sink, uint16_t port_space, QpType qp_type);
  // Ends the id as the kernel's rdma_destroy_id does: a connection is
  // disconnected (DREQ), a request refused (REJ), its port freed. No event
  // for it follows.
  void destroy_id(uint32_t id);
  // Events of the id go to `sink` from now on (MIGRATE_ID).
  Errno set_sink(uint32_t id, EventSink& sink);

  // ENOENT: no such id. EINVAL: not idle. EADDRNOTAVAIL: no soft device owns
  // the address, or the port is held and either address is the any address.
  // EADDRINUSE: the port is held on that address. Loopback binds like the
  // any address (no device, every address), as the kernel does.
  Errno bind(uint32_t id, const IpEndpoint& address);
  // Binds first when idle (to `source`, else the any address). Then
  // ADDR_RESOLVED, or ADDR_ERROR (-EHOSTUNREACH) when no soft device owns
  // the destination. EINVAL: not idle or bound, or families differ.
  Errno resolve_address(uint32_t id, const IpEndpoint* source, const IpEndpoint& destination);
  // ROUTE_RESOLVED. EINVAL unless the address was resolved.
  Errno resolve_route(uint32_t id);
  Errno query(uint32_t id, IdAddressing& out) const;

  // Binds first when idle (any address, a free port). EINVAL unless idle or
  // bound. A backlog outside 1..1024 means 1024.
  Errno listen(uint32_t id, int backlog);
  // A CONNECT_REQUEST of this listener was read: one more may queue.
  void connect_request_delivered(uint32_t listen_id);

  // Sends the REQ (a SIDR_REQ for a UD id). EINVAL unless the route is
  // resolved, or with too much private data (56 bytes; 180 for SIDR). No
  // listener: REJECTED 8 (UD: UNREACHABLE 1), as the peer's CM would say.
  Errno connect(uint32_t id, const ConnectionParams& params);
  // Passive side: sends the REP, or the SIDR_REP (EINVAL unless a request
  // is pending, or with more than 196 bytes of private data; 136 for SIDR).
  Errno accept(uint32_t id, const ConnectionParams& params);
  // Active side, after CONNECT_RESPONSE: sends the RTU. EINVAL otherwise.
  Errno establish(uint32_t id);
  // What the QP of an id learned that its CM may not have (rdma_notify(3)):
  // traffic arrived before the RTU (the QP's COMM_EST), or the QP moved to
  // its alternate path.
  enum class QpNotice : uint8_t { kCommunicationEstablished, kPathMigrated };
  // COMM_EST on the passive side waiting for the RTU: established as if it
  // had come (ESTABLISHED event); EISCONN when already established.
  // PATH_MIG: 0 when established (no alternate path is loaded by this CM).
  // EINVAL otherwise.
  Errno notify(uint32_t id, QpNotice notice);
  // Refuses a pending request (REJ with `reason`, 28 or 35, and at most 148
  // bytes of private data; UD: SIDR_REP "rejected", 136 bytes). EINVAL when
  // nothing can be refused.
  Errno reject(uint32_t id, std::span<const uint8_t> private_data, uint16_t reason);
  // DREQ when connected, DREP when the peer asked; otherwise nothing, and 0.
  // EINVAL when the id never had a connection attempt.
  Errno disconnect(uint32_t id);
  // The attributes that move a QP of this id to `state` (INIT, RTR, RTS),
  // and which of them apply (QpAttrMask). EINVAL when the id has no device
  // or the connection is not far enough (RTR before the REP).
  Errno qp_attributes(uint32_t id, QpState state, QpAttributes& out, uint32_t& mask) const;

  // Options (rdma_set_option). TOS: the traffic class of the id's path.
  // ACK timeout: the QP's (RC ids only, else EINVAL); a route resolved
  // after it has a packet lifetime of one less. AF only: an IPv6 id that
  // takes no IPv4 (only before listening, else EINVAL). Reuse address:
  // allowed while idle, or bound and not listening (EINVAL otherwise).
  Errno set_type_of_service(uint32_t id, uint8_t tos);
  Errno set_ack_timeout(uint32_t id, uint8_t timeout);
  Errno set_ipv6_only(uint32_t id, bool only);
  Errno set_reuse_address(uint32_t id, bool reuse);

  // UD ids: the address of an IP multicast group, as MULTICAST_JOIN with
  // `cookie`. EINVAL unless the id is bound or resolved to a device and the
  // address is a multicast one.
  Errno join_multicast(uint32_t id, const IpEndpoint& group, uint64_t cookie);

  // Handed every CM MAD the agent receives, and its sender.
  void on_mad(const CmMad& mad, const AgentAddress& from);
  // The agent's clock tick: retransmissions, timeouts, timewait. Returns
  // when it next needs to run (0: nothing pending).
  uint64_t on_timer(uint64_t now_ns);

 private:
  Id* find(uint32_t id);
  const Id* find(uint32_t id) const;
  Id* find_by_comm_id(uint32_t local_comm_id);
  void post(Id& id, Event event);
  Errno ensure_agent();
  Errno bind_locked(Id& id, const IpEndpoint& address);
  Errno resolve_multicast(Id& id, const IpEndpoint& group);
  Errno resolve_off_host(Id& id, const IpEndpoint& destination);
  void release_port(Id& id);
  void end_connection_on_destroy(Id& id);

  // The handshake (cm_handshake.cc).
  void send(Id& id, const CmMad& mad, bool await_reply);
  void resend_last(Id& id);
  void send_to(const CmMad& mad, const AgentAddress& to);
  // The id's side of a request: comm ID, QPN, service ID, transaction.
  void begin_request(Id& id, uint32_t qpn);
  // A REQ or SIDR_REQ: kept, and sent once its listener is found.
  void start_request(Id& id, const CmMad& mad);
  void seek_listener(Id& id);
  void send_request(Id& id, const AgentAddress& to);
  void send_rej(const AgentAddress& to, uint32_t local_comm_id, uint32_t remote_comm_id,
                uint16_t reason, std::span<const uint8_t> private_data, uint8_t rejected);
  void send_drep(Id& id);
  void enter_timewait(Id& id);
  void on_req(const CmMad& mad, const ReqMessage& req, const AgentAddress& from);
  void on_rep(const CmMad& mad, const RepMessage& rep, const AgentAddress& from);
  void on_rtu(uint32_t remote_comm_id);
  // REP_SENT -> ESTABLISHED, with the ESTABLISHED event.
  void enter_established(Id& id);
  void on_rej(const RejMessage& rej);
  void on_dreq(const CmMad& mad, uint32_t remote_comm_id);
  void on_drep(uint32_t remote_comm_id);
  Id* find_listener(uint16_t port_space, uint16_t port, const Gid& address);
  // The listener an RDMA CM request (service ID, private data with the IP
  // header) is for. false: none here (refuse it); true with no listener:
  // not an IP request at all (ignore it).
  bool match_listener(uint64_t service_id, std::span<const uint8_t> private_data, Id*& listener,
                      IpEndpoint& local, IpEndpoint& remote);
  Id& new_passive_id(const Id& listener, const IpEndpoint& local, const IpEndpoint& remote);
  // SIDR (cm_datagram.cc).
  Errno connect_datagram(Id& id, const ConnectionParams& params);
  void on_sidr_req(const CmMad& mad, const SidrReqMessage& req, const AgentAddress& from);
  void on_sidr_rep(const SidrRepMessage& rep);
  void send_sidr_rep(Id& id, uint8_t status, uint32_t qpn, uint32_t qkey,
                     std::span<const uint8_t> private_data);
  Id* find_by_remote(uint32_t remote_comm_id, const AgentAddress& remote);
  void on_reply_timeout(Id& id);
  void on_deadline(Id& id, uint64_t now_ns);
  static bool has_live_peer_to_watch(const Id& id);
  void on_peer_gone(Id& id);

  Engine& engine_;
  CmPortDirectory& ports_;
  mutable std::mutex mutex_;
  std::unique_ptr<CmAgent> agent_;  // started by the first bind
  bool shut_down_ = false;
  uint32_t next_handle_ = 1;
  uint32_t comm_id_base_ = 0;  // random: comm IDs of two runs differ
  // How often the processes at the far end of connections are checked for
  // life: a killed one sends no DREQ, so its peers learn of it this way.
  static constexpr uint64_t kPeerCheckIntervalNs = 250'000'000;
  // A request with no listener is refused after 10 looks, 2 ms apart: about
  // the round trip of a REQ and its REJ on a fabric.
  static constexpr uint32_t kListenerLookups = 10;
  static constexpr uint64_t kListenerLookupIntervalNs = 2'000'000;
  uint64_t next_peer_check_ns_ = 0;
  std::map<uint32_t, std::unique_ptr<Id>> ids_;
};

}  // namespace softverbs::cm
