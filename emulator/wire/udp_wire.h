// The UDP wire: IB global frames carried between hosts as RoCEv2 packets
// (packet/roce_v2.h), UDP destination port 4791.
//
// How a packet for QPN x on host H reaches its process: every softverbs
// process of one user in a network namespace binds port 4791 on every
// address with SO_REUSEPORT, so the kernel hands each arriving datagram to
// one of them (by a hash of its addresses and ports). That process checks the
// ICRC and passes the frame on to whoever owns QPN x on the destination
// address's device, through the shared-memory wire, itself included. No
// daemon, no root, nothing to configure, a dead process takes nothing with
// it (the kernel drops its socket from the group), and a foreign sender
// (the kernel's rxe) needs only the standard port. The price is one
// shared-memory hop for the datagrams that land in another process than
// their QP's.
//
// Each flow leaves from its own UDP source port (roce_v2_source_port), from
// a socket bound to that port, so that ECMP can spread QPs and a capture
// tells them apart; past kMaxSourcePorts ports, or where a port is taken by
// someone else, frames leave from the 4791 socket.
//
// Sending never blocks: a datagram the socket cannot take now is dropped and
// counted, like a packet lost on the network; RC retransmits it.
//
// Threads: send(), bursts and counters() from any thread; receive() from any
// thread, one at a time (others find it busy and return 0); wait_readable()
// from one thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "emulator/packet/roce_v2.h"
#include "emulator/types.h"
#include "emulator/wire/wire.h"

namespace softverbs {

class UdpWire {
 public:
  // SOFTVERBS_UDP_PORT, or 4791.
  static uint16_t configured_port();

  // Binds `port` for IPv4 and (where the host has it) IPv6. nullptr + err:
  // EADDRINUSE when a program of another user, or the kernel's rxe, holds
  // the port; what socket(2) and bind(2) return otherwise.
  static std::unique_ptr<UdpWire> open(uint16_t port, Errno& err);
  ~UdpWire();
  UdpWire(const UdpWire&) = delete;
  UdpWire& operator=(const UdpWire&) = delete;

  // Sends one IB global frame as a RoCEv2 packet from its SGID to its DGID
  // (to a multicast DGID out of interface `multicast_ifindex`). False (and
  // counted) when it is no global frame or the socket refuses it. Inside a
  // burst of this thread the datagram may wait for the burst's end (or for
  // kSendBatch others) and leave with them in one sendmmsg; a refusal is
  // then only counted.
  bool send(std::span<const uint8_t> frame, uint32_t multicast_ifindex = 0);
  // Wire::begin_burst/end_burst, for this thread.
  void begin_burst();
  void end_burst();

  // Joins (leaves) IP multicast group `group` (IPv4-mapped or IPv6) on an
  // interface, counting joins: datagrams to the group's port then arrive
  // here. Datagrams this host sends to a group do not loop back: its own
  // members get theirs over shared memory.
  void join_group(const Gid& group, uint32_t ifindex);
  void leave_group(const Gid& group, uint32_t ifindex);

  // Receives up to `budget` waiting datagrams without blocking and hands
  // each good one, as an IB global frame, to `deliver`. Returns how many it
  // took off the sockets; 0 too when another thread is receiving.
  size_t receive(const std::function<void(std::span<const uint8_t>)>& deliver, size_t budget);

  // Blocks until a datagram may be waiting or interrupt() was called.
  void wait_readable();
  // Makes wait_readable() return, now and ever after.
  void interrupt();
  // Takes no more of the port's datagrams: each port socket is replaced,
  // under the same descriptor, by an unbound one, so a thread still
  // sending through it finds a socket, never a closed or reused number.
  void leave_port();

  uint16_t port() const { return port_; }
  bool has_ipv6() const { return ipv6_fd_ >= 0; }
  // Fills the udp_* fields.
  void add_counters(WireCounters& counters) const;

  static constexpr size_t kMaxSourcePorts = 64;
  static constexpr int kSocketBufferBytes = 4 << 20;
  static constexpr size_t kReceiveBatch = 16;
  static constexpr size_t kSendBatch = 16;
  // The most a UDP GSO send carries, below the 64 KiB of an IP packet.
  static constexpr size_t kMaxGsoBytes = 63 * 1024;

 private:
  struct ReceiveBuffers;
  struct PendingSends;
  struct SendTally;
  explicit UdpWire(uint16_t port);

  static PendingSends& pending();
  static uint64_t flush(PendingSends& p);
  void send_run(PendingSends& p, size_t begin, size_t end, SendTally& tally);
  static void send_each(PendingSends& p, size_t begin, size_t end, SendTally& tally);
  static size_t gso_group(const PendingSends& p, size_t first, size_t end);
  bool send_segmented(PendingSends& p, size_t first, size_t count, SendTally& tally);
  int compose(std::span<const uint8_t> frame, uint32_t multicast_ifindex, PendingSends& p,
              size_t i);

  int socket_for(bool ipv4, uint16_t source_port);
  void set_membership(const Gid& group, uint32_t ifindex, bool member);
  size_t receive_from(int fd, const std::function<void(std::span<const uint8_t>)>& deliver,
                      size_t budget);
  void take_datagram(const packet::RoceV2Addressing& a, std::span<const uint8_t> datagram,
                     const std::function<void(std::span<const uint8_t>)>& deliver);

  const uint16_t port_;
  int ipv4_fd_ = -1;
  int ipv6_fd_ = -1;
  int epoll_fd_ = -1;
  int interrupt_fd_ = -1;

  std::mutex source_ports_mutex_;
  std::unordered_map<uint32_t, int> source_port_fds_;  // (ipv4 << 16 | port) -> fd, -1: none

  std::mutex groups_mutex_;
  std::vector<std::pair<std::pair<Gid, uint32_t>, uint32_t>> groups_;  // (group, ifindex) -> joins

  std::mutex receive_mutex_;
  std::unique_ptr<ReceiveBuffers> receive_buffers_;

  // Until a GSO send fails for want of support (an old kernel, a route
  // without checksum offload).
  std::atomic<bool> gso_works_{true};
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> send_failures_{0};
  std::atomic<uint64_t> segmented_sends_{0};
  std::atomic<uint64_t> segmented_datagrams_{0};
  std::atomic<uint64_t> coalesced_receives_{0};
  std::atomic<uint64_t> coalesced_datagrams_{0};
  std::atomic<uint64_t> dropped_malformed_{0};
  std::atomic<uint64_t> dropped_bad_icrc_{0};
};

}  // namespace softverbs
