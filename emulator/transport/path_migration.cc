// Automatic path migration: the APM state machine of path_migration.h.
#include "emulator/transport/path_migration.h"

#include <cerrno>

#include "emulator/objects/qp_impl.h"

namespace softverbs {
namespace {

constexpr uint16_t kFirstMulticastLid = 0xc000;  // IBTA 4.1.1

}  // namespace

Errno check_migration_request(MigrationState current, uint8_t requested, QpState next,
                              bool alternate_path_loaded, bool& migrate) {
  migrate = false;
  switch (static_cast<MigrationState>(requested)) {
    case MigrationState::kRearm:
      // Only the CA arms, once the peer shows it rearmed too.
      if (current == MigrationState::kArmed || next != QpState::kRts) return EINVAL;
      return alternate_path_loaded ? 0 : EINVAL;
    case MigrationState::kMigrated:
      if (current == MigrationState::kRearm) return EINVAL;
      if (next != QpState::kRts && next != QpState::kSqd) return EINVAL;
      migrate = current == MigrationState::kArmed;
      return 0;
    case MigrationState::kArmed: return EINVAL;
  }
  return EINVAL;
}

MigrationState QpImpl::migration_state() const {
  return static_cast<MigrationState>(attr.path_mig_state);
}

bool QpImpl::migration_request_bit() const {
  // IBTA 9.2.4: MigReq is 1 while Migrated, 0 while a migration is armed.
  return migration_state() == MigrationState::kMigrated;
}

Errno QpImpl::check_alternate_path(const QpAttributes& a) const {
  const DeviceDescription& device = hca->description();
  if (!hca->attributes().cap_auto_path_mig) return EINVAL;  // RoCE: as the kernel
  if (!device.has_port(a.alt_port_num) || a.alt_av.port_num != a.alt_port_num) return EINVAL;
  if (a.alt_av.dlid == 0 || a.alt_av.dlid >= kFirstMulticastLid) return EINVAL;
  if (a.alt_pkey_index >= kPkeyTableLen || a.alt_timeout > 31) return EINVAL;
  if (a.alt_av.is_global && a.alt_av.sgid_index >= device.gids_of(a.alt_port_num).size())
    return EINVAL;
  return 0;
}

void QpImpl::migrate(MigrationCause cause) {
  attr.av = attr.alt_av;
  attr.port_num = attr.alt_port_num;
  attr.pkey_index = attr.alt_pkey_index;
  attr.timeout = attr.alt_timeout;
  peer_device_index = alt_peer_device_index;
  attr.path_mig_state = static_cast<uint8_t>(MigrationState::kMigrated);
  ++counters.path_migrations;
  raise(AsyncEventType::kPathMig);
  // What was in flight went to a port that is gone, and its responses
  // would come back there: send it again now rather than at the timeout.
  if (cause == MigrationCause::kPortDown) completer.resend_outstanding();
}

bool QpImpl::migrate_instead_of_failing(MigrationCause cause) {
  if (migration_state() != MigrationState::kArmed) return false;
  if (!engine->port_up(device_index, attr.alt_port_num)) {
    ++counters.path_migration_errors;
    raise(AsyncEventType::kPathMigErr);
    return false;
  }
  migrate(cause);
  return true;
}

bool QpImpl::arrived_over_alternate_path(const packet::Headers& h) const {
  // IBTA 17.2.8: a migration request counts only from the alternate path:
  // from the peer's alternate LID, to this QP's alternate port.
  return hca->description().port_of_lid(h.lrh.dlid) == attr.alt_port_num &&
         h.lrh.slid == attr.alt_av.dlid;
}

void QpImpl::note_peer_migration_state(const packet::Headers& h) {
  switch (migration_state()) {
    case MigrationState::kRearm:
      if (!h.bth.mig_req) attr.path_mig_state = static_cast<uint8_t>(MigrationState::kArmed);
      return;
    case MigrationState::kArmed:
      if (h.bth.mig_req && arrived_over_alternate_path(h)) migrate(MigrationCause::kPeer);
      return;
    case MigrationState::kMigrated: return;
  }
}

void QpImpl::on_port_down(uint8_t port) {
  if (attr.port_num != port) return;
  TargetEntryScope scope(*this);  // closes the entry: a downed port takes nothing
  if (!can_send()) return;
  migrate_instead_of_failing(MigrationCause::kPortDown);
}

void Hca::Impl::migrate_away_from(uint8_t port) {
  std::lock_guard lock(objects_mutex);
  for (QpImpl* qp : qps) {
    std::lock_guard qp_lock(qp->mutex);
    qp->on_port_down(port);
  }
}

}  // namespace softverbs
