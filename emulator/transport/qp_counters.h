// Protocol event counters (IBTA names where there are any). One set per QP
// and one per device (the sum over its QPs), readable with `softverbs stats`.
#pragma once

#include <cstdint>

namespace softverbs {

#define SOFTVERBS_QP_COUNTERS(X)                                                   \
  X(packets_sent, "request and response packets sent")                            \
  X(packets_received, "packets received for this QP")                             \
  X(packets_dropped_unfit, "packets dropped: wrong transport or direction for this QP, a state that takes none, or a P_Key mismatch") \
  X(retransmitted_packets, "request packets sent again (go back N)")              \
  X(retransmit_timeouts, "local ACK timeouts (IBTA 9.7.6.1.3)")                   \
  X(retransmit_timeouts_waited, "local ACK timeouts re-armed, no retry spent: the peer of this host had not run yet") \
  X(rnr_naks_sent, "RNR NAKs sent: no receive WQE")                               \
  X(rnr_naks_received, "RNR NAKs received")                                       \
  X(sequence_naks_sent, "PSN sequence error NAKs sent")                           \
  X(sequence_naks_received, "PSN sequence error NAKs received")                   \
  X(duplicate_requests, "duplicate requests received (answered, not re-executed)")\
  X(out_of_sequence_dropped, "out-of-sequence requests dropped after the NAK")    \
  X(stale_responses, "responses for PSNs no longer outstanding")                  \
  X(implied_naks, "READ/atomic responses found lost by a later response")         \
  X(remote_errors_naked, "fatal NAKs sent: access, invalid request, op error")    \
  X(uc_messages_dropped, "UC messages dropped because a packet was lost")         \
  X(atomic_replays, "duplicate atomics answered from the saved result")          \
  X(port_down_drops, "packets not sent because the port was down")                \
  X(path_migrations, "moves to the alternate path (IBV_EVENT_PATH_MIG)")          \
  X(path_migration_errors, "migrations due but the alternate port was down")      \
  X(forced_rnr_naks, "RNR NAKs forced by softverbs rnr or a plan's rnr rule")     \
  X(runs_sent, "runs of packets sent as one frame, payload left in place")      \
  X(runs_received, "runs of packets received, payload pulled in one copy")      \
  X(run_pull_failures, "runs whose payload could not be pulled (resent)")         \
  X(direct_operations, "WRITEs, READs and atomics this side executed on the target itself, no packet sent") \
  X(payloads_placed, "WRITEs with immediate whose bytes this side placed on the target itself") \
  X(executed_by_initiators, "WRITEs, READs and atomics an initiator executed on this QP directly")  \
  X(sends_placed, "SENDs this side placed on the target itself: accepted under its QP entry, no ACK") \
  X(placed_sends_taken, "SENDs an initiator placed on this QP, taken into receive WQEs") \
  X(placed_sends_dropped, "placed SENDs dropped: from an earlier life of this QP, replayed, after a loss, or in a state that takes none") \
  X(placed_sends_lost, "times placed SENDs were found lost in a damaged ring (the QP failed)") \
  X(qkey_violations, "UD datagrams dropped: Q_Key differs from the QP's")        \
  X(datagrams_dropped_no_receive, "UD datagrams dropped: no receive WQE posted")  \
  X(datagrams_dropped_too_long, "UD datagrams dropped: longer than the receive WQE")\
  X(datagrams_unroutable, "UD datagrams sent to an address no soft device owns")   \
  X(datagrams_to_empty_groups, "UD datagrams sent to a multicast group no QP has joined on this host") \
  X(datagrams_above_mtu, "UD messages longer than the MTU, not sent (IBTA C10-93.1.1)")

struct QpCounters {
#define SOFTVERBS_DECLARE_COUNTER(name, help) uint64_t name = 0;
  SOFTVERBS_QP_COUNTERS(SOFTVERBS_DECLARE_COUNTER)
#undef SOFTVERBS_DECLARE_COUNTER

  QpCounters& operator+=(const QpCounters& o) {
#define SOFTVERBS_ADD_COUNTER(name, help) name += o.name;
    SOFTVERBS_QP_COUNTERS(SOFTVERBS_ADD_COUNTER)
#undef SOFTVERBS_ADD_COUNTER
    return *this;
  }
};

}  // namespace softverbs
