// Multicast: the in-process directory, attaching QPs to groups, where a
// datagram's copies go, and handing an arriving one to each local member.
#include <algorithm>
#include <cerrno>

#include "emulator/engine/engine.h"
#include "emulator/engine/multicast_directory.h"
#include "emulator/host/device_config.h"
#include "emulator/objects/qp_impl.h"
#include "emulator/packet/roce_v2.h"
#include "emulator/wire/shm_registry_layout.h"

namespace softverbs {

// ---- LocalMulticastDirectory

Errno LocalMulticastDirectory::attach(uint32_t device_index, const Gid& gid, uint16_t lid,
                                      uint32_t qpn) {
  std::lock_guard lock(mutex_);
  uint32_t group_members = 0;
  for (const Member& m : members_) {
    if (m.device_index == device_index && m.qpn == qpn && m.gid == gid && m.lid == lid) return 0;
    if (m.gid == gid) ++group_members;
  }
  if (group_members >= kMaxMulticastQpsPerGroup) return ENOMEM;
  members_.push_back(Member{device_index, gid, lid, qpn});
  return 0;
}

Errno LocalMulticastDirectory::detach(uint32_t device_index, const Gid& gid, uint16_t lid,
                                      uint32_t qpn) {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(members_.begin(), members_.end(), [&](const Member& m) {
    return m.device_index == device_index && m.qpn == qpn && m.gid == gid && m.lid == lid;
  });
  if (it == members_.end()) return EINVAL;
  members_.erase(it);
  return 0;
}

Errno LocalMulticastDirectory::routes(const Gid* gid, uint16_t lid,
                                      std::vector<MulticastRoute>& out) {
  std::lock_guard lock(mutex_);
  out.clear();
  for (const Member& m : members_) {
    if (gid ? m.gid != *gid : m.lid != lid) continue;
    out.push_back(MulticastRoute{m.device_index, m.qpn});
    break;  // every member lives in this one process
  }
  return 0;
}

// ---- Engine

Errno Engine::attach_multicast(QpImpl& qp, const Gid& gid, uint16_t lid) {
  std::lock_guard lock(intake_mutex_);
  for (const LocalAttachment& a : local_multicast_)
    if (a.qp == &qp && a.gid == gid && a.lid == lid) return 0;  // attached already
  if (Errno err = multicast_->attach(qp.device_index, gid, lid, qp.qpn)) return err;
  local_multicast_.push_back(LocalAttachment{gid, lid, &qp});
  // A RoCE group is an IP multicast group: other hosts' members are reached
  // through the wire, which joins it on the device's interfaces.
  if (const DeviceDescription* d = find_device_by_index(qp.device_index);
      d && d->link_layer == LinkLayer::kEthernet && packet::is_ip_multicast(gid)) {
    std::vector<uint32_t> ifindexes;
    for (const GidEntry& entry : d->gids)
      if (entry.ifindex && std::find(ifindexes.begin(), ifindexes.end(), entry.ifindex) ==
                               ifindexes.end())
        ifindexes.push_back(entry.ifindex);
    wire_->joined_multicast(qp.device_index, gid, qp.qpn, ifindexes);
  }
  return 0;
}

Errno Engine::detach_multicast(QpImpl& qp, const Gid& gid, uint16_t lid) {
  std::lock_guard lock(intake_mutex_);
  auto it = std::find_if(local_multicast_.begin(), local_multicast_.end(),
                         [&](const LocalAttachment& a) {
                           return a.qp == &qp && a.gid == gid && a.lid == lid;
                         });
  if (it == local_multicast_.end()) return EINVAL;
  local_multicast_.erase(it);
  wire_->left_multicast(qp.device_index, gid, qp.qpn);
  return multicast_->detach(qp.device_index, gid, lid, qp.qpn);
}

void Engine::detach_all_multicast(QpImpl& qp) {
  std::lock_guard lock(intake_mutex_);
  std::erase_if(local_multicast_, [&](const LocalAttachment& a) {
    if (a.qp != &qp) return false;
    wire_->left_multicast(qp.device_index, a.gid, qp.qpn);
    multicast_->detach(qp.device_index, a.gid, a.lid, qp.qpn);
    return true;
  });
}

void Engine::multicast_routes(const Gid* gid, uint16_t lid, std::vector<MulticastRoute>& out) {
  if (multicast_->routes(gid, lid, out) != 0) out.clear();
}

void Engine::deliver_multicast(const packet::DecodedPacket& pkt) {
  // IBTA 10.5.2.3: every member QP gets a copy, except the QP that sent it.
  const packet::Headers& h = pkt.headers;
  const DeviceDescription* source = find_device_by_lid(h.lrh.slid);
  if (!source && h.has_grh) source = find_device_by_gid(h.grh.sgid);
  bool delivered = false;
  for (const LocalAttachment& a : local_multicast_) {
    if (h.has_grh ? a.gid != h.grh.dgid : a.lid != h.lrh.dlid) continue;
    QpImpl& qp = *a.qp;
    if (source && qp.device_index == source->index && qp.qpn == h.deth.src_qp) continue;
    std::lock_guard qp_lock(qp.mutex);
    if (!qp.port_up()) continue;
    qp.receive(pkt);
    delivered = true;
  }
  if (!delivered) counters_.frames_dropped_no_qp.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace softverbs
