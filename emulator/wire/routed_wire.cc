#include "emulator/wire/routed_wire.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "emulator/host/gsi_routing.h"
#include "emulator/packet/codec.h"
#include "emulator/packet/frame_fields.h"
#include "emulator/packet/icrc.h"
#include "emulator/sync/internal_thread.h"

namespace softverbs {
namespace {

constexpr size_t kPollBatch = 16;
// Bounds the last pulls of a closing wire, should datagrams keep coming.
constexpr size_t kFinalPulls = 64;
constexpr uint32_t kMulticastQpn = 0xffffff;  // IBTA 10.5.2.3

}  // namespace

RoutedWire::RoutedWire(std::unique_ptr<Wire> local, Doorbell& local_doorbell,
                       std::unique_ptr<UdpWire> udp, Routing routing)
    : local_(std::move(local)),
      local_doorbell_(local_doorbell),
      udp_(std::move(udp)),
      routing_(std::move(routing)) {
  forward_fn_ = [this](std::span<const uint8_t> frame) { forward(frame); };
  receive_thread_ = start_internal_thread([this] { receive_thread_main(); });
}

RoutedWire::~RoutedWire() {
  stop_receiving();
  udp_.reset();
}

void RoutedWire::stop_receiving() {
  if (stopping_.exchange(true)) return;
  udp_->interrupt();
  receive_thread_.join();
  // The kernel spreads the host's datagrams over every process's socket on
  // the port, this one's included until it leaves: what it was handed for
  // the other processes goes on to them, then the port is left at once.
  for (size_t i = 0; i < kFinalPulls && pull_udp(UdpWire::kReceiveBatch) > 0; ++i) {
  }
  udp_->leave_port();
}

void RoutedWire::receive_thread_main() {
  while (!stopping_.load(std::memory_order_relaxed)) {
    udp_->wait_readable();
    // Polling as an application thread does: frames forwarded to our own
    // mailbox then ring no doorbell, since this thread serves them itself.
    local_doorbell_.begin_application_poll();
    const size_t pulled = pull_udp(UdpWire::kReceiveBatch);
    if (pulled != 0) {
      std::lock_guard lock(intake_mutex_);
      if (intake_) intake_();
    }
    if (local_doorbell_.end_application_poll()) local_doorbell_.wake();
    if (pulled == 0) std::this_thread::yield();
  }
}

void RoutedWire::set_intake(std::function<void()> intake) {
  std::lock_guard lock(intake_mutex_);
  intake_ = std::move(intake);
}

size_t RoutedWire::pull_udp(size_t budget) { return udp_->receive(forward_fn_, budget); }

// A frame from another host: to the local owner of its destination QP.
void RoutedWire::forward(std::span<const uint8_t> frame) {
  const uint32_t qpn = packet::frame_dest_qp(frame);
  if (qpn == kMulticastQpn) return forward_to_group_members(frame);
  uint32_t device = 0;
  if (!routing_.owner(packet::frame_dgid(frame), device)) {
    dropped_not_here_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (qpn == kGsiQpn) return forward_to_gsi_owner(WireAddress{device, qpn}, frame);
  local_->send(WireAddress{device, qpn}, frame);
}

// A MAD to QP1 goes to the QP that serves it here, its DestQP (and so its
// ICRC) rewritten to that QP's.
void RoutedWire::forward_to_gsi_owner(const WireAddress& qp1, std::span<const uint8_t> frame) {
  uint32_t owner_qpn = 0;
  std::array<uint8_t, packet::kMaxFrameBytes> copy;
  if (frame.size() > copy.size() || !routing_.gsi_router ||
      !routing_.gsi_router(frame, owner_qpn)) {
    dropped_gsi_unclaimed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::memcpy(copy.data(), frame.data(), frame.size());
  packet::set_frame_dest_qp(std::span(copy.data(), frame.size()), owner_qpn);
  const size_t covered = frame.size() - packet::kIcrcBytes;
  packet::store_icrc(copy.data() + covered, packet::icrc_ib(std::span(copy.data(), covered)));
  local_->send(WireAddress{qp1.device_index, owner_qpn}, std::span(copy.data(), frame.size()));
}

// Every host that has members got the datagram (IP multicast); this
// process hands it to one of its own member QPs, if it has any.
void RoutedWire::forward_to_group_members(std::span<const uint8_t> frame) {
  const Gid group = packet::frame_dgid(frame);
  WireAddress member{};
  {
    std::lock_guard lock(memberships_mutex_);
    auto it = std::find_if(memberships_.begin(), memberships_.end(),
                           [&](const Membership& m) { return m.gid == group; });
    if (it == memberships_.end()) {  // another process's group, or none here
      dropped_not_here_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    member = WireAddress{it->device_index, it->member_qpn};
  }
  local_->send(member, frame);
}

void RoutedWire::joined_multicast(uint32_t device_index, const Gid& gid, uint32_t member_qpn,
                                  std::span<const uint32_t> ifindexes) {
  std::lock_guard lock(memberships_mutex_);
  memberships_.push_back(
      Membership{device_index, gid, member_qpn, {ifindexes.begin(), ifindexes.end()}});
  for (uint32_t ifindex : ifindexes) udp_->join_group(gid, ifindex);
}

void RoutedWire::left_multicast(uint32_t device_index, const Gid& gid, uint32_t member_qpn) {
  std::lock_guard lock(memberships_mutex_);
  auto it = std::find_if(memberships_.begin(), memberships_.end(), [&](const Membership& m) {
    return m.device_index == device_index && m.gid == gid && m.member_qpn == member_qpn;
  });
  if (it == memberships_.end()) return;
  for (uint32_t ifindex : it->ifindexes) udp_->leave_group(gid, ifindex);
  memberships_.erase(it);
}

bool RoutedWire::send(const WireAddress& dst, std::span<const uint8_t> frame) {
  if (dst.device_index != WireAddress::kOffHost) return local_->send(dst, frame);
  sent_off_host_.store(true, std::memory_order_relaxed);
  // A group is sent to out of the interface of the source address.
  uint32_t ifindex = 0;
  if (dst.qpn == kMulticastQpn) ifindex = routing_.interface_of(packet::frame_sgid(frame));
  return udp_->send(frame, ifindex);
}

bool RoutedWire::send_with(const WireAddress& dst, size_t max_bytes, FrameWriter& writer) {
  if (dst.device_index != WireAddress::kOffHost)
    return local_->send_with(dst, max_bytes, writer);
  return Wire::send_with(dst, max_bytes, writer);  // a private buffer, then send()
}

size_t RoutedWire::poll(const std::function<void(std::span<const uint8_t>)>& deliver,
                        size_t budget) {
  if (sent_off_host_.load(std::memory_order_relaxed)) pull_udp(kPollBatch);
  return local_->poll(deliver, budget);
}

bool RoutedWire::may_have_input() const {
  return sent_off_host_.load(std::memory_order_relaxed) || local_->may_have_input();
}

WireCounters RoutedWire::counters() const {
  WireCounters c = local_->counters();
  udp_->add_counters(c);
  c.udp_dropped_not_here += dropped_not_here_.load(std::memory_order_relaxed) +
                            dropped_gsi_unclaimed_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace softverbs
