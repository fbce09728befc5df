// Ending a connection (IBTA 12.9.6): DREQ and DREP, timewait, and what
// destroying an id sends in each state.
#include <algorithm>
#include <cerrno>

#include "emulator/cm/cm_agent.h"
#include "emulator/cm/cm_codec.h"
#include "emulator/cm/cm_id.h"
#include "emulator/cm/cm_timing.h"
#include "emulator/cm/connection_manager.h"

namespace softverbs::cm {

void ConnectionManager::send_drep(Id& id) {
  DrepMessage drep;
  drep.local_comm_id = id.local_comm_id;
  drep.remote_comm_id = id.remote_comm_id;
  send(id, CmMad{id.transaction_id, 0, drep}, false);
}

void ConnectionManager::enter_timewait(Id& id) {
  id.cm = CmState::kTimewait;
  id.awaiting_reply = false;
  // The kernel's: 2^(ack timeout - 8) ms.
  id.deadline_ns = time_code_ns(id.local_ack_timeout);
  id.deadline_ns += CmAgent::now_ns();
  if (agent_) agent_->wake();
}

// ---- Disconnection

Errno ConnectionManager::disconnect(uint32_t handle) {
  std::lock_guard lock(mutex_);
  Id* id = find(handle);
  if (!id) return ENOENT;
  if (id->state == IdState::kListen) return 0;
  if (id->cm == CmState::kNone) return EINVAL;
  if (id->cm == CmState::kEstablished) {
    DreqMessage dreq;
    dreq.local_comm_id = id->local_comm_id;
    dreq.remote_comm_id = id->remote_comm_id;
    dreq.remote_qpn_eecn = id->remote_qpn;
    id->transaction_id = (uint64_t{id->local_comm_id} << 32) | (id->transaction_id + 1);
    id->cm = CmState::kDreqSent;
    send(*id, CmMad{id->transaction_id, 0, dreq}, true);
    // A DREQ waits its ACK timeout, not a REQ's response time.
    id->timeout_ns = 2 * time_code_ns(id->local_ack_timeout);
    id->deadline_ns = CmAgent::now_ns() + id->timeout_ns;
  } else if (id->cm == CmState::kDreqRcvd) {
    send_drep(*id);
    enter_timewait(*id);
  }
  return 0;
}

void ConnectionManager::on_dreq(const CmMad& mad, uint32_t remote_comm_id) {
  Id* id = find_by_comm_id(remote_comm_id);
  if (!id) return;
  if (id->cm == CmState::kTimewait) {
    resend_last(*id);  // our DREP was lost
    return;
  }
  if (id->cm != CmState::kEstablished && id->cm != CmState::kRepSent &&
      id->cm != CmState::kDreqSent)
    return;
  id->awaiting_reply = false;
  id->deadline_ns = 0;
  id->transaction_id = mad.transaction_id;
  id->cm = CmState::kDreqRcvd;
  id->state = IdState::kDisconnect;
  Event event;
  event.type = EventType::kDisconnected;
  post(*id, event);
}

void ConnectionManager::on_drep(uint32_t remote_comm_id) {
  Id* id = find_by_comm_id(remote_comm_id);
  if (!id || id->cm != CmState::kDreqSent) return;
  id->state = IdState::kDisconnect;
  enter_timewait(*id);
  Event event;
  event.type = EventType::kDisconnected;
  post(*id, event);
}

void ConnectionManager::end_connection_on_destroy(Id& id) {
  if (id.qp_type == QpType::kUd) {
    if (id.cm == CmState::kReqRcvd)
      send_sidr_rep(id, static_cast<uint8_t>(SidrStatus::kRejected), 0, 0, {});
    return;
  }
  switch (id.cm) {
    case CmState::kEstablished: {
      DreqMessage dreq;
      dreq.local_comm_id = id.local_comm_id;
      dreq.remote_comm_id = id.remote_comm_id;
      dreq.remote_qpn_eecn = id.remote_qpn;
      send(id, CmMad{id.transaction_id + 1, 0, dreq}, false);
      break;
    }
    case CmState::kReqRcvd:
    case CmState::kRepSent:
    case CmState::kRepRcvd:
      send_rej(id.remote_agent, id.local_comm_id, id.remote_comm_id,
               static_cast<uint16_t>(RejectReason::kConsumerDefined), {},
               static_cast<uint8_t>(id.cm == CmState::kRepRcvd ? MessageRef::kRep
                                                               : MessageRef::kReq));
      break;
    case CmState::kReqSent:
      send_rej(id.remote_agent, id.local_comm_id, 0,
               static_cast<uint16_t>(RejectReason::kTimeout), {},
               static_cast<uint8_t>(MessageRef::kOther));
      break;
    case CmState::kDreqRcvd:
      send_drep(id);
      break;
    default:
      break;
  }
}

}  // namespace softverbs::cm
