// What the agent hands the manager: each MAD that arrives, and the timers
// (retransmission, reply timeouts, the end of timewait).
#include <algorithm>
#include <cerrno>
#include <map>

#include "emulator/cm/cm_agent.h"
#include "emulator/cm/cm_codec.h"
#include "emulator/cm/cm_id.h"
#include "emulator/cm/cm_timing.h"
#include "emulator/cm/connection_manager.h"
#include "emulator/engine/engine.h"

namespace softverbs::cm {

// ---- Arrivals and timers

void ConnectionManager::on_mad(const CmMad& mad, const AgentAddress& from) {
  std::lock_guard lock(mutex_);
  std::visit(
      [&](const auto& message) {
        using T = std::decay_t<decltype(message)>;
        if constexpr (std::is_same_v<T, ReqMessage>) {
          on_req(mad, message, from);
        } else if constexpr (std::is_same_v<T, RepMessage>) {
          on_rep(mad, message, from);
        } else if constexpr (std::is_same_v<T, RtuMessage>) {
          on_rtu(message.remote_comm_id);
        } else if constexpr (std::is_same_v<T, RejMessage>) {
          on_rej(message);
        } else if constexpr (std::is_same_v<T, DreqMessage>) {
          if (!find_by_comm_id(message.remote_comm_id)) {
            // The connection is gone here: say so, or the peer waits out
            // its DREQ retries.
            DrepMessage drep;
            drep.remote_comm_id = message.local_comm_id;
            send_to(CmMad{mad.transaction_id, 0, drep}, from);
            return;
          }
          on_dreq(mad, message.remote_comm_id);
        } else if constexpr (std::is_same_v<T, DrepMessage>) {
          on_drep(message.remote_comm_id);
        } else if constexpr (std::is_same_v<T, SidrReqMessage>) {
          on_sidr_req(mad, message, from);
        } else if constexpr (std::is_same_v<T, SidrRepMessage>) {
          on_sidr_rep(message);
        }
        // MRA: softverbs agents answer in time and never send one; ignored.
      },
      mad.message);
}

void ConnectionManager::on_reply_timeout(Id& id) {
  id.awaiting_reply = false;
  id.deadline_ns = 0;
  Event event;
  event.status = -ETIMEDOUT;
  if (id.cm == CmState::kDreqSent) {
    id.state = IdState::kDisconnect;
    enter_timewait(id);
    event.type = EventType::kDisconnected;
  } else {
    id.cm = CmState::kIdle;
    event.type = EventType::kUnreachable;
    event.datagram = id.qp_type == QpType::kUd;
  }
  post(id, event);
}

uint64_t ConnectionManager::on_timer(uint64_t now_ns) {
  std::lock_guard lock(mutex_);
  uint64_t next = 0;
  auto wake_by = [&](uint64_t deadline) {
    if (deadline != 0 && (next == 0 || deadline < next)) next = deadline;
  };
  const bool check_peers = now_ns >= next_peer_check_ns_;
  if (check_peers) next_peer_check_ns_ = now_ns + kPeerCheckIntervalNs;
  std::map<uint32_t, bool> peer_alive;  // by agent QPN, for this pass
  for (auto& [handle, owned] : ids_) {
    Id& id = *owned;
    if (id.deadline_ns != 0 && id.deadline_ns <= now_ns) on_deadline(id, now_ns);
    wake_by(id.deadline_ns);
    if (!has_live_peer_to_watch(id)) continue;
    wake_by(next_peer_check_ns_);
    if (!check_peers) continue;
    auto [known, inserted] = peer_alive.try_emplace(id.remote_agent.qpn, true);
    if (inserted) known->second = engine_.qpn_holder_alive(0, id.remote_agent.qpn);
    if (!known->second) on_peer_gone(id);
  }
  return next;
}

void ConnectionManager::on_deadline(Id& id, uint64_t now_ns) {
  if (id.cm == CmState::kReqSent && id.remote_agent.qpn == 0) {
    seek_listener(id);  // the request has not found its listener yet
  } else if (id.cm == CmState::kTimewait) {
    id.cm = CmState::kIdle;
    id.deadline_ns = 0;
    Event event;
    event.type = EventType::kTimewaitExit;
    post(id, event);
  } else if (id.awaiting_reply && id.retries_left > 0) {
    --id.retries_left;
    resend_last(id);
    id.deadline_ns = now_ns + id.timeout_ns;
  } else if (id.awaiting_reply) {
    on_reply_timeout(id);
  } else {
    id.deadline_ns = 0;
  }
}

bool ConnectionManager::has_live_peer_to_watch(const Id& id) {
  if (id.remote_agent.qpn == 0) return false;  // no peer found yet
  // Another host's processes are not in our registry: a dead peer there
  // shows as the CM's and the QP's timeouts.
  if (id.remote_agent.off_host) return false;
  switch (id.cm) {
    case CmState::kReqSent:
    case CmState::kRepSent:
    case CmState::kRepRcvd:
    case CmState::kEstablished:
    case CmState::kDreqSent:
      return id.qp_type != QpType::kUd;
    default:
      return false;
  }
}

// The peer's process ended without a word (killed): say what its kernel
// would have sent when its ids were destroyed, a DREQ for a connection, a
// REJ (consumer) for one being set up.
void ConnectionManager::on_peer_gone(Id& id) {
  id.awaiting_reply = false;
  id.deadline_ns = 0;
  Event event;
  if (id.cm == CmState::kEstablished || id.cm == CmState::kDreqSent) {
    const bool we_asked = id.cm == CmState::kDreqSent;
    id.state = IdState::kDisconnect;
    event.type = EventType::kDisconnected;
    if (we_asked) {
      enter_timewait(id);  // as if its DREP had come
    } else {
      id.cm = CmState::kDreqRcvd;
    }
  } else {
    id.cm = CmState::kIdle;
    event.type = EventType::kRejected;
    event.status = static_cast<int32_t>(RejectReason::kConsumerDefined);
    event.params.private_data.assign(RejMessage::kPrivateDataBytes, 0);
  }
  post(id, event);
}

}  // namespace softverbs::cm
