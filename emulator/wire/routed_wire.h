// The wire of a process that reaches other hosts: frames for devices of
// this host go over the local wire (shared memory), frames for another
// host's address (WireAddress::kOffHost) over the UDP wire.
//
// What arrives over UDP is passed on to the process that owns its QP on the
// local wire, so the engine, its doorbells and the busy-polling rules are
// those of the local wire alone. A receive thread waits on the UDP sockets;
// once this process has sent over UDP (it expects answers), its pollers
// also take datagrams off the sockets themselves, so a busy-polling
// program sees them without a thread hop.
//
// Threads: as the local wire; the receive thread takes only the UDP wire's
// receive side and the local wire's send().
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>
#include <thread>

#include "emulator/types.h"
#include "emulator/wire/doorbell.h"
#include "emulator/wire/udp_wire.h"
#include "emulator/wire/wire.h"

namespace softverbs {

class RoutedWire final : public Wire {
 public:
  // Which soft device of this host owns an address (a GID of it), if any.
  using AddressOwner = std::function<bool(const Gid& address, uint32_t& device_index)>;
  // Which local QP a frame to QP1 is for (gsi_routing.h), if any.
  using GsiRouter = std::function<bool(std::span<const uint8_t> frame, uint32_t& qpn)>;
  // The interface an address of this host is on (0: unknown).
  using InterfaceOf = std::function<uint32_t(const Gid& address)>;

  struct Routing {
    AddressOwner owner;
    GsiRouter gsi_router;
    InterfaceOf interface_of;
  };

  // `local_doorbell` is the local wire's (it lives inside `local`): what
  // arrives over UDP rings it as a frame from a process of this host would.
  RoutedWire(std::unique_ptr<Wire> local, Doorbell& local_doorbell, std::unique_ptr<UdpWire> udp,
             Routing routing);
  ~RoutedWire() override;

  bool send(const WireAddress& dst, std::span<const uint8_t> frame) override;
  bool send_with(const WireAddress& dst, size_t max_bytes, FrameWriter& writer) override;
  size_t poll(const std::function<void(std::span<const uint8_t>)>& deliver,
              size_t budget) override;
  void begin_burst() override { udp_->begin_burst(); }
  void end_burst() override { udp_->end_burst(); }
  bool may_have_input() const override;
  bool has_deferred() const override { return local_->has_deferred(); }
  void joined_multicast(uint32_t device_index, const Gid& gid, uint32_t member_qpn,
                        std::span<const uint32_t> ifindexes) override;
  void left_multicast(uint32_t device_index, const Gid& gid, uint32_t member_qpn) override;
  WireCounters counters() const override;

  Wire& local() { return *local_; }

  // Runs this process's packet intake (the engine's progress) on the
  // receive thread right after it took datagrams off the sockets, so that a
  // packet for a QP of this process, an RDMA WRITE to a program that spins
  // on memory, is served without waking another thread.
  // Any time; set_intake({}) returns once no intake runs any more.
  void set_intake(std::function<void()> intake);
  // Stops the receive thread, hands on what the port's sockets hold for
  // the host's other processes, and leaves the port, so that a process
  // going away takes none of their datagrams with it. The wire still sends.
  // Idempotent; the destructor does it too (a process at exit does it
  // alone: its threads may still send).
  void stop_receiving();

 private:
  // Takes waiting datagrams off the UDP sockets and hands them on.
  size_t pull_udp(size_t budget);
  void forward(std::span<const uint8_t> frame);
  void forward_to_gsi_owner(const WireAddress& qp1, std::span<const uint8_t> frame);
  void forward_to_group_members(std::span<const uint8_t> frame);
  void receive_thread_main();

  std::unique_ptr<Wire> local_;
  Doorbell& local_doorbell_;
  std::unique_ptr<UdpWire> udp_;
  Routing routing_;
  std::mutex intake_mutex_;  // held while intake_ runs
  std::function<void()> intake_;
  // The groups QPs of this process are in: a datagram to one is handed to
  // the first member's QP, and the engine gives every member here a copy.
  struct Membership {
    uint32_t device_index;
    Gid gid;
    uint32_t member_qpn;
    std::vector<uint32_t> ifindexes;
  };
  std::mutex memberships_mutex_;
  std::vector<Membership> memberships_;
  std::function<void(std::span<const uint8_t>)> forward_fn_;
  std::atomic<bool> sent_off_host_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> dropped_not_here_{0};
  std::atomic<uint64_t> dropped_gsi_unclaimed_{0};
  std::thread receive_thread_;
};

}  // namespace softverbs
