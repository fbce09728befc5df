// The events of a QP's protocol trace (qp_trace.h), as the transport reports
// them. Each does nothing unless the QP is traced. PSNs are written relative
// to where the QP's started (its sq_psn for the requester and the
// completer, its rq_psn for the responder), so programs that choose random
// PSNs trace alike.
//
//   requester                   completer                     responder
//   send <opcode> <psn>         recv <opcode> <psn> <aeth>    recv <opcode> <psn>
//   run <opcode> <psn>+<n>      timeout <psn> retries-left=n  run <opcode> <psn>+<n>
//   direct <operation>          rnr-wait <psn> rnr-retries-   send <opcode> <psn> [<aeth>]
//                                 left=<n>                    complete <status>
//                               go-back <psn>
//                               complete <operation> <status>
//
// and in each, `fault <action> <tx|rx> <opcode> <psn> <attempt>` where a
// fault rule acted on one of its frames. A datagram a UD QP receives is
// written without its PSN (its sender's), and 0 in its fault events. <aeth>: ack, rnr-nak, nak-sequence,
// nak-invalid-request, nak-remote-access, nak-remote-operational,
// nak-invalid-rd-request.
//
// The requester's lines wait for the completer to settle them
// (QpTrace::request_event): the packets it sent past a lost one before the
// NAK came, which the responder drops unseen, are left out; so are the
// requests the responder drops that way.
//
// Timers that were re-armed for a peer that has not run
// (same_host/fair_timeout.h) are not events: they depend on the host.
#pragma once

#include <cstdint>

#include "emulator/fault/fault_plan.h"
#include "emulator/packet/headers.h"
#include "emulator/types.h"

namespace softverbs {

struct QpImpl;
struct RunFrame;

namespace trace {

void packet_sent(const QpImpl& qp, const packet::Headers& h);
void packet_received(const QpImpl& qp, const packet::Headers& h);
void run_sent(const QpImpl& qp, const RunFrame& run);
void run_received(const QpImpl& qp, const RunFrame& run);
// A WQE, given PSN `psn`, executed on the target directly (same_host_route.h).
void executed_directly(const QpImpl& qp, uint32_t psn, WcOpcode opcode);
void ack_timeout(const QpImpl& qp, uint32_t psn, uint32_t retries_left);
void rnr_wait(const QpImpl& qp, uint32_t psn, uint32_t rnr_retries_left);
void go_back(const QpImpl& qp, uint32_t psn);
// The requests before `una` are acknowledged.
void acknowledged(const QpImpl& qp, uint32_t una);
void send_completed(const QpImpl& qp, WcOpcode opcode, WcStatus status);
void receive_completed(const QpImpl& qp, WcStatus status);
// A fault rule acted on a frame of `qp` (`attempt`: emulator/fault/frame_identity.h).
void fault_applied(const QpImpl& qp, fault::Direction direction, const packet::Headers& h,
                   fault::Action action, uint32_t attempt);

const char* status_name(WcStatus status);

}  // namespace trace
}  // namespace softverbs
