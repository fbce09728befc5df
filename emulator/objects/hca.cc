#include "emulator/objects/hca.h"

#include <cerrno>

#include "emulator/objects/hca_impl.h"
#include "emulator/objects/qp_impl.h"
#include "emulator/objects/srq_impl.h"
#include "emulator/same_host/target_table.h"

namespace softverbs {

DeviceAttributes device_attributes_of(const DeviceDescription& d) {
  DeviceAttributes a;
  a.max_pd = d.limits.max_pd;
  a.max_cq = d.limits.max_cq;
  a.max_qp = d.limits.max_qp;
  a.max_mr = d.limits.max_mr;
  a.max_srq = d.limits.max_srq;
  a.max_ah = d.limits.max_ah;
  a.max_mw = d.limits.max_mw;
  a.fw_ver = SOFTVERBS_VERSION;  // ibv_devinfo shows the release, as `softverbs --version`
  a.node_guid = d.node_guid;
  a.sys_image_guid = d.node_guid;
  a.page_size_cap = ~0xfffull;  // 4 KiB pages and larger
  a.vendor_id = 0x5356;  // "SV": no IEEE OUI is claimed
  a.vendor_part_id = 1;
  a.hw_ver = 1;
  a.atomic_cap = AtomicCapability::kHca;  // atomic among this HCA's atomics
  a.max_qp_rd_atom = kMaxRdAtomic;
  a.max_qp_init_rd_atom = kMaxRdAtomic;
  a.max_res_rd_atom = kMaxRdAtomic * d.limits.max_qp;
  a.phys_port_cnt = d.port_count();
  a.cap_auto_path_mig = d.link_layer == LinkLayer::kInfiniBand;
  return a;
}

PortAttributes port_attributes_of(const DeviceDescription& d, uint8_t port) {
  PortAttributes p;
  p.link_layer = d.link_layer;
  p.lid = d.has_port(port) ? d.lid_of(port) : 0;
  // A RoCE port has no subnet manager; its GIDs are the host's IP addresses.
  p.sm_lid = d.link_layer == LinkLayer::kEthernet ? 0 : 1;
  p.cap_ip_based_gids = d.link_layer == LinkLayer::kEthernet;
  // The connection manager (emulator/cm) serves every soft port.
  p.cap_cm_supported = true;
  p.active_mtu = d.active_mtu;
  p.gid_tbl_len = kGidTableLen;
  return p;
}

// ---------------------------------------------------------------- Hca

Hca::Hca(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  impl_->self = this;
  for (uint8_t p = 1; p <= impl_->description.port_count(); ++p) {
    if (impl_->engine->port_up(impl_->description.index, p)) continue;
    impl_->ports[p - 1].state = PortState::kDown;
    impl_->ports[p - 1].phys_state = 3;
  }
  impl_->engine->add_hca(this);
}

Hca::~Hca() { impl_->engine->remove_hca(this); }

std::unique_ptr<Hca> Hca::open(uint32_t index, Errno& err) {
  if (index >= configured_devices().size()) {
    err = ENODEV;
    return nullptr;
  }
  Engine* engine = Engine::process(err);
  if (!engine) return nullptr;
  return open_on(*engine, index, err);
}

std::unique_ptr<Hca> Hca::open_on(Engine& engine_ref, uint32_t index, Errno& err) {
  auto devices = configured_devices();
  if (index >= devices.size()) {
    err = ENODEV;
    return nullptr;
  }
  Engine* engine = &engine_ref;
  auto impl = std::make_unique<Impl>();
  impl->engine = engine;
  impl->description = devices[index];
  impl->attributes = device_attributes_of(impl->description);
  for (uint8_t p = 1; p <= impl->description.port_count(); ++p)
    impl->ports[p - 1] = port_attributes_of(impl->description, p);
  err = 0;
  return std::unique_ptr<Hca>(new Hca(std::move(impl)));
}

const DeviceDescription& Hca::description() const { return impl_->description; }
const DeviceAttributes& Hca::attributes() const { return impl_->attributes; }
Engine& Hca::engine() const { return *impl_->engine; }
Errno Hca::wait_serving_intake(std::atomic<uint32_t>& word, uint32_t expected) {
  return impl_->engine->wait_serving_intake(word, expected);
}
uint64_t Hca::clock_ns() const { return impl_->engine->clock().now_ns(); }
uint64_t Hca::wallclock_ns() const { return impl_->engine->clock().wallclock_ns(); }

Errno Hca::query_port(uint8_t port, PortAttributes& out) const {
  if (!impl_->description.has_port(port)) return EINVAL;
  std::lock_guard lock(impl_->port_mutex);
  out = impl_->ports[port - 1];
  return 0;
}

Errno Hca::query_gid(uint8_t port, uint32_t index, Gid& out) const {
  if (!impl_->description.has_port(port) || index >= kGidTableLen) return EINVAL;
  const auto& gids = impl_->description.gids_of(port);
  // Unpopulated entries of the table read as zero, as on an HCA.
  out = index < gids.size() ? gids[index].gid : Gid{};
  return 0;
}

Errno Hca::query_pkey(uint8_t port, uint32_t index, uint16_t& out) const {
  if (!impl_->description.has_port(port) || index >= kPkeyTableLen) return EINVAL;
  out = kDefaultPkey;
  return 0;
}

QpCounters Hca::counters() const {
  std::lock_guard lock(impl_->objects_mutex);
  QpCounters total = impl_->destroyed_qp_counters;
  for (QpImpl* qp : impl_->qps) {
    std::lock_guard qp_lock(qp->mutex);
    total += qp->current_counters();
  }
  return total;
}

void Hca::set_async_event_sink(AsyncEventSink* sink) {
  impl_->async_sink.store(sink, std::memory_order_release);
}

ObjectQuota::Slot Hca::take_slot(ObjectKind kind, Errno& err) {
  const DeviceAttributes& a = impl_->attributes;
  uint32_t limit = 0;
  switch (kind) {
    case ObjectKind::kPd: limit = a.max_pd; break;
    case ObjectKind::kCq: limit = a.max_cq; break;
    case ObjectKind::kQp: limit = a.max_qp; break;
    case ObjectKind::kMr: limit = a.max_mr; break;
    case ObjectKind::kSrq: limit = a.max_srq; break;
    case ObjectKind::kAh: limit = a.max_ah; break;
    case ObjectKind::kMw: limit = a.max_mw; break;
  }
  ObjectQuota::Slot slot =
      impl_->engine->object_quota(impl_->description.index).take(kind, limit);
  err = slot ? 0 : ENOMEM;
  return slot;
}

std::unique_ptr<Pd> Hca::alloc_pd(Errno& err) {
  ObjectQuota::Slot slot = take_slot(ObjectKind::kPd, err);
  if (!slot) return nullptr;
  return std::unique_ptr<Pd>(
      new Pd(*this, impl_->next_pd_handle.fetch_add(1), std::move(slot)));
}

Pd::~Pd() = default;

// ---------------------------------------------------------------- Cq

std::unique_ptr<Cq> Hca::create_cq(uint32_t cqe, CompletionEventSink* sink, Errno& err,
                                   uint32_t stamps) {
  if (cqe == 0 || cqe > impl_->attributes.max_cqe) {
    err = EINVAL;
    return nullptr;
  }
  ObjectQuota::Slot slot = take_slot(ObjectKind::kCq, err);
  if (!slot) return nullptr;
  auto impl = std::make_unique<Cq::Impl>();
  impl->slot = std::move(slot);
  impl->hca = this;
  impl->engine = impl_->engine;
  impl->sink = sink;
  impl->stamps = stamps;
  impl->ring.resize(cqe);
  err = 0;
  return std::unique_ptr<Cq>(new Cq(std::move(impl)));
}

// ---------------------------------------------------------------- Qp

namespace {
// The size of a scatter/gather element in a send WQE (address, length, key).
constexpr uint32_t kSgeBytes = 16;

// Turns the capabilities a new QP asked for (checked against the device's
// limits) into those it is granted, as ibv_create_qp reports them back.
void grant_capabilities(Hca::QpInit& init, uint32_t device_max_inline_data) {
  QpCapabilities& c = init.cap;
  // At least one of everything, as HCAs round up.
  c.max_send_wr = std::max(c.max_send_wr, 1u);
  c.max_recv_wr = std::max(c.max_recv_wr, 1u);
  c.max_send_sge = std::max(c.max_send_sge, 1u);
  c.max_recv_sge = std::max(c.max_recv_sge, 1u);
  // A send WQE holds its SGEs or its inline data in the same room, so the
  // inline data may fill what the SGEs would: 16 bytes each (rxe and mlx5
  // grant this too, and programs such as rdma_xclient inline 16 bytes on a
  // QP that asked for none).
  c.max_inline_data = std::min(std::max(c.max_inline_data, c.max_send_sge * kSgeBytes),
                               device_max_inline_data);
  if (init.type == QpType::kXrcSend) init.srq = nullptr;  // it receives nothing
  if (init.srq || init.type == QpType::kXrcSend)
    c.max_recv_wr = c.max_recv_sge = 0;  // the SRQ's count instead, or none
}
}  // namespace

std::unique_ptr<Qp> Hca::create_qp(Pd& pd, QpInit& init, Errno& err) {
  const DeviceAttributes& a = impl_->attributes;
  QpCapabilities& c = init.cap;
  // An XRC initiator receives nothing: a receive CQ is optional.
  const bool needs_recv_cq = init.type != QpType::kXrcSend;
  if (init.type == QpType::kXrcRecv) {
    err = EINVAL;  // create_xrc_target_qp
    return nullptr;
  }
  if (!init.send_cq || (needs_recv_cq && !init.recv_cq) || c.max_send_wr > a.max_qp_wr ||
      c.max_recv_wr > a.max_qp_wr || c.max_send_sge > a.max_sge ||
      c.max_recv_sge > a.max_sge || c.max_inline_data > a.max_inline_data) {
    err = EINVAL;
    return nullptr;
  }
  auto impl = std::make_unique<QpImpl>();
  impl->hca = this;
  impl->engine = impl_->engine;
  impl->pd = &pd;
  impl->type = init.type;
  impl->device_index = impl_->description.index;
  impl->send_cq = init.send_cq;
  impl->recv_cq = init.recv_cq;
  impl->sq_sig_all = init.sq_sig_all;
  grant_capabilities(init, a.max_inline_data);
  impl->srq = init.srq;
  if (init.srq) impl->responder.use_srq(init.srq->impl().max_sge());
  impl->cap = c;
  impl->sq.resize(c);
  impl->rq.resize(c);
  impl->attr.cap = c;
  impl->attr.port_num = 1;
  // A UD QP has no path: its datagrams may be as long as the port's MTU.
  if (init.type == QpType::kUd) {
    PortAttributes port;
    query_port(1, port);
    impl->attr.path_mtu = port.active_mtu;
  }
  if (!add_qp(*impl, err)) return nullptr;
  if (init.type == QpType::kRc) {
    TargetTable& table = impl_->engine->same_host().target_table();
    impl->target_entry = table.add_qp(impl->device_index, impl->qpn);
    if (impl->target_entry) impl->target_receives = &table.receives_of(impl->target_entry);
    impl->start_placed_sends();
  }
  pd.users.fetch_add(1);
  if (init.srq) init.srq->users.fetch_add(1);
  init.send_cq->users.fetch_add(1);
  if (init.recv_cq) init.recv_cq->users.fetch_add(1);
  err = 0;
  return std::unique_ptr<Qp>(new Qp(std::move(impl)));
}

bool Hca::add_qp(QpImpl& qp, Errno& err) {
  qp.slot = take_slot(ObjectKind::kQp, err);
  if (!qp.slot) return false;
  if (Errno e = impl_->engine->add_qp(qp.device_index, &qp, qp.qpn)) {
    err = e == EAGAIN ? ENOMEM : e;
    return false;
  }
  std::lock_guard lock(impl_->objects_mutex);
  impl_->qps.insert(&qp);
  return true;
}

}  // namespace softverbs
