// What the host allows of the same-host shortcuts (same_host.h).
#include "emulator/same_host/same_host.h"

#include <cstdlib>
#include <string_view>

#include "emulator/fault/fault_injector.h"
#include "emulator/same_host/deferred_sharing.h"
#include "emulator/same_host/target_table.h"
#include "emulator/wire/shm_registry_layout.h"

namespace softverbs {
namespace {

bool switched_off(const char* variable) {
  const char* value = std::getenv(variable);
  return value && std::string_view(value) == "0";
}

}  // namespace

void SameHost::FreeDeleter::operator()(uint64_t* p) const { std::free(p); }

SameHost::SameHost(SameHostPeers* peers, const fault::FaultInjector* faults, Settings settings)
    : peers_(peers),
      faults_(faults),
      runs_enabled_(!switched_off("SOFTVERBS_RUNS")),
      direct_enabled_(!switched_off("SOFTVERBS_DIRECT")),
      placed_sends_enabled_(!switched_off("SOFTVERBS_PLACED_SENDS")),
      fair_timers_(settings.fair_timers),
      target_table_(std::make_unique<TargetTable>(peers ? peers->own_target_area()
                                                        : std::span<uint8_t>{})),
      deferred_sharing_(std::make_unique<DeferredSharing>(*target_table_)) {
  if (settings.local_delivery && !switched_off("SOFTVERBS_LOCAL_DELIVERY"))
    local_qpns_.reset(static_cast<uint64_t*>(
        std::calloc(kMaxRegistryDevices * kQpnTableSize / 64, sizeof(uint64_t))));
  fault_plan_changed();
}

SameHost::~SameHost() = default;

bool SameHost::faults_need_every_packet() const {
  return faults_ && faults_->sees_every_packet();
}

void SameHost::mark_local_qpn(uint32_t device_index, uint32_t qpn, bool here) {
  if (device_index >= kMaxRegistryDevices || qpn >= kQpnTableSize || !local_qpns_) return;
  const size_t bit = size_t{device_index} * kQpnTableSize + qpn;
  std::atomic_ref<uint64_t> word(local_qpns_[bit / 64]);
  if (here)
    word.fetch_or(uint64_t{1} << (bit % 64), std::memory_order_release);
  else
    word.fetch_and(~(uint64_t{1} << (bit % 64)), std::memory_order_release);
}

bool SameHost::delivers_locally(const WireAddress& dst) const {
  // QPNs below the first allocatable (QP0, QP1) name a port, not a QP, and
  // a multicast QPN names a group: those go by the wire, which routes them.
  if (!local_qpns_ || dst.device_index >= kMaxRegistryDevices ||
      dst.qpn < kFirstAllocatableQpn || dst.qpn >= kQpnTableSize)
    return false;
  if (faults_need_every_packet()) return false;
  const size_t bit = size_t{dst.device_index} * kQpnTableSize + dst.qpn;
  std::atomic_ref<uint64_t> word(local_qpns_[bit / 64]);
  return word.load(std::memory_order_acquire) & (uint64_t{1} << (bit % 64));
}

bool SameHost::runs_allowed(const WireAddress& dst) {
  // A run names memory of this host: never off it.
  if (!runs_enabled_ || !peers_ || dst.device_index == WireAddress::kOffHost) return false;
  if (faults_need_every_packet()) return false;
  return peers_->accepts_runs(dst);
}

void SameHost::refuse_runs() {
  runs_refused_here_.store(true, std::memory_order_relaxed);
  fault_plan_changed();
}

bool SameHost::direct_possible() const {
  return direct_enabled_ && peers_ && !direct_refused_.load(std::memory_order_relaxed) &&
         !faults_need_every_packet();
}

PeerTargetArea SameHost::direct_target(const WireAddress& dst) {
  if (!direct_possible() || dst.device_index == WireAddress::kOffHost) return {};
  return peers_->peer_target_area(dst);
}

void SameHost::open_route_to(const WireAddress& dst) {
  if (!peers_ || dst.device_index == WireAddress::kOffHost) return;
  // The mapping stays with the wire's peers, where the first frame looks.
  peers_->peer_target_area(dst, SameHostPeers::Attention::kSkip);
}

bool SameHost::placed_sends_possible() const {
  // No system call moves a placed SEND: a refused cross-memory attach does
  // not stop it.
  return takes_placed_sends() && peers_ && !faults_need_every_packet();
}

PeerTargetArea SameHost::placed_target(const WireAddress& dst) {
  if (!placed_sends_possible() || dst.device_index == WireAddress::kOffHost) return {};
  return peers_->peer_target_area(dst, SameHostPeers::Attention::kSkip);
}

std::optional<IntakeBacklog> SameHost::intake_backlog(const WireAddress& dst) {
  // Between hosts the peer's CPU is its own business, as with an HCA's.
  if (!fair_timers_ || !peers_ || dst.device_index == WireAddress::kOffHost) return std::nullopt;
  return peers_->intake_backlog(dst);
}

void SameHost::fault_plan_changed() {
  const bool faults = faults_need_every_packet();
  target_table_->set_accepting(direct_enabled_ && !faults);
  if (peers_)
    peers_->set_accepting_runs(runs_enabled_ && !faults &&
                               !runs_refused_here_.load(std::memory_order_relaxed));
}

void SameHost::stop_deferred_sharing() { deferred_sharing_->stop(); }

void SameHost::stop_accepting() { target_table_->set_accepting(false); }

}  // namespace softverbs
