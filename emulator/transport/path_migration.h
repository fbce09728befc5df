// Automatic path migration (IBTA 17.2.8): a connected QP may hold an
// alternate path (another port, another LID of the peer) and move its
// traffic there when the primary path fails, without losing a message.
//
// Each QP has an APM state:
//   Migrated  the start: no migration possible; packets carry BTH MigReq = 1.
//   Rearm     software loaded an alternate path and asked (Modify QP) to
//             arm; packets carry MigReq = 0. The first packet of the peer
//             with MigReq = 0 shows the peer rearmed too:
//   Armed     migration is possible, by
//             - software: Modify QP to Migrated, in RTS or SQD;
//             - the retry count running out on the primary path;
//             - the primary port going down;
//             - the peer: a packet with MigReq = 1 arriving over the
//               alternate path means the peer migrated.
// Migrating loads the alternate path into the primary one (port, address
// vector, P_Key index, timeout), enters Migrated and raises
// IBV_EVENT_PATH_MIG; outstanding packets are sent again on the new path.
// An automatic migration whose alternate port is down on this host cannot
// happen: IBV_EVENT_PATH_MIG_ERR, and the QP carries on (and fails, if the
// primary path is gone for good) as without an alternate path.
//
// Alternate paths exist on InfiniBand ports only, as the kernel refuses
// them on RoCE. All of it runs under the QP's lock.
#pragma once

#include <cstdint>

#include "emulator/transport/qp_state.h"
#include "emulator/types.h"

namespace softverbs {

// Values as the IBTA and enum ibv_mig_state number them.
enum class MigrationState : uint8_t { kMigrated = 0, kRearm = 1, kArmed = 2 };

// Why a QP migrates: decides what else happens (see migrate()).
enum class MigrationCause : uint8_t { kSoftware, kPeer, kRetriesExhausted, kPortDown };

// The state a Modify QP asks for, checked against the current one: software
// may ask Migrated -> Rearm (into RTS, with an alternate path loaded) and
// Armed -> Migrated (a migration, in RTS or SQD); asking for the state the
// QP is in changes nothing, except that Rearm cannot be asked in Armed.
// EINVAL otherwise; `migrate` says whether the request is a migration.
Errno check_migration_request(MigrationState current, uint8_t requested, QpState next,
                              bool alternate_path_loaded, bool& migrate);

}  // namespace softverbs
