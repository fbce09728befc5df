// Where every field of every CM message sits: the IBTA message tables
// (Vol 1, chapter 12, "Table 106 REQ Message Contents" to "Table 120
// SIDR_REP Message Contents"), transcribed in their Byte[Bit] notation
// (cm_field_layout.h). Byte offsets count from the start of the message
// data, i.e. MAD byte 24. Bits not listed are reserved: sent as zero,
// ignored on receipt.
//
// One table per message serves both directions: for_each_field(message,
// visit) calls visit(field, member) for every field in wire order, with
// `message` const when encoding and mutable when decoding.
//
// Internal to the codec (and to tests that check the tables themselves);
// everyone else goes through cm_codec.h.
#pragma once

#include <concepts>
#include <type_traits>

#include "emulator/cm/cm_field_layout.h"
#include "emulator/cm/cm_messages.h"

namespace softverbs::cm::layout {

template <typename M, typename Message>
concept Is = std::same_as<std::remove_const_t<M>, Message>;

struct PathFieldNames {
  const char* local_port_lid;
  const char* remote_port_lid;
  const char* local_port_gid;
  const char* remote_port_gid;
  const char* flow_label;
  const char* packet_rate;
  const char* traffic_class;
  const char* hop_limit;
  const char* sl;
  const char* subnet_local;
  const char* local_ack_timeout;
};

inline constexpr PathFieldNames kPrimaryPathNames = {
    "primary_path.local_port_lid", "primary_path.remote_port_lid",
    "primary_path.local_port_gid", "primary_path.remote_port_gid",
    "primary_path.flow_label",     "primary_path.packet_rate",
    "primary_path.traffic_class",  "primary_path.hop_limit",
    "primary_path.sl",             "primary_path.subnet_local",
    "primary_path.local_ack_timeout"};

inline constexpr PathFieldNames kAlternatePathNames = {
    "alternate_path.local_port_lid", "alternate_path.remote_port_lid",
    "alternate_path.local_port_gid", "alternate_path.remote_port_gid",
    "alternate_path.flow_label",     "alternate_path.packet_rate",
    "alternate_path.traffic_class",  "alternate_path.hop_limit",
    "alternate_path.sl",             "alternate_path.subnet_local",
    "alternate_path.local_ack_timeout"};

// A REQ path: 44 bytes from `base` (52 primary, 96 alternate).
template <typename Path, typename Visit>
  requires Is<Path, CmPath>
void for_each_path_field(uint16_t base, const PathFieldNames& n, Path& p,
                         Visit&& visit) {
  const auto at = [base](int offset) { return static_cast<uint16_t>(base + offset); };
  visit(BitField{n.local_port_lid, at(0), 0, 16}, p.local_port_lid);
  visit(BitField{n.remote_port_lid, at(2), 0, 16}, p.remote_port_lid);
  visit(ByteField{n.local_port_gid, at(4), 16}, p.local_port_gid);
  visit(ByteField{n.remote_port_gid, at(20), 16}, p.remote_port_gid);
  visit(BitField{n.flow_label, at(36), 0, 20}, p.flow_label);
  visit(BitField{n.packet_rate, at(39), 2, 6}, p.packet_rate);
  visit(BitField{n.traffic_class, at(40), 0, 8}, p.traffic_class);
  visit(BitField{n.hop_limit, at(41), 0, 8}, p.hop_limit);
  visit(BitField{n.sl, at(42), 0, 4}, p.sl);
  visit(BitField{n.subnet_local, at(42), 4, 1}, p.subnet_local);
  visit(BitField{n.local_ack_timeout, at(43), 0, 5}, p.local_ack_timeout);
}

// Table 106, REQ. The ECE vendor ID fills bytes 5-7, reserved before.
template <typename M, typename Visit>
  requires Is<M, ReqMessage>
void for_each_field(M& m, Visit&& visit) {
  visit(BitField{"local_comm_id", 0, 0, 32}, m.local_comm_id);
  visit(BitField{"vendor_id", 5, 0, 24}, m.vendor_id);
  visit(BitField{"service_id", 8, 0, 64}, m.service_id);
  visit(BitField{"local_ca_guid", 16, 0, 64}, m.local_ca_guid);
  visit(BitField{"local_qkey", 28, 0, 32}, m.local_qkey);
  visit(BitField{"local_qpn", 32, 0, 24}, m.local_qpn);
  visit(BitField{"responder_resources", 35, 0, 8}, m.responder_resources);
  visit(BitField{"local_eecn", 36, 0, 24}, m.local_eecn);
  visit(BitField{"initiator_depth", 39, 0, 8}, m.initiator_depth);
  visit(BitField{"remote_eecn", 40, 0, 24}, m.remote_eecn);
  visit(BitField{"remote_cm_response_timeout", 43, 0, 5}, m.remote_cm_response_timeout);
  visit(BitField{"transport_service_type", 43, 5, 2}, m.transport_service_type);
  visit(BitField{"end_to_end_flow_control", 43, 7, 1}, m.end_to_end_flow_control);
  visit(BitField{"starting_psn", 44, 0, 24}, m.starting_psn);
  visit(BitField{"local_cm_response_timeout", 47, 0, 5}, m.local_cm_response_timeout);
  visit(BitField{"retry_count", 47, 5, 3}, m.retry_count);
  visit(BitField{"pkey", 48, 0, 16}, m.pkey);
  visit(BitField{"path_mtu", 50, 0, 4}, m.path_mtu);
  visit(BitField{"rdc_exists", 50, 4, 1}, m.rdc_exists);
  visit(BitField{"rnr_retry_count", 50, 5, 3}, m.rnr_retry_count);
  visit(BitField{"max_cm_retries", 51, 0, 4}, m.max_cm_retries);
  visit(BitField{"srq", 51, 4, 1}, m.srq);
  visit(BitField{"extended_transport_type", 51, 5, 3}, m.extended_transport_type);
  for_each_path_field(52, kPrimaryPathNames, m.primary_path, visit);
  for_each_path_field(96, kAlternatePathNames, m.alternate_path, visit);
  visit(ByteField{"private_data", 140, 92}, m.private_data);
}

// Table 107, MRA.
template <typename M, typename Visit>
  requires Is<M, MraMessage>
void for_each_field(M& m, Visit&& visit) {
  visit(BitField{"local_comm_id", 0, 0, 32}, m.local_comm_id);
  visit(BitField{"remote_comm_id", 4, 0, 32}, m.remote_comm_id);
  visit(BitField{"message_mraed", 8, 0, 2}, m.message_mraed);
  visit(BitField{"service_timeout", 9, 0, 5}, m.service_timeout);
  visit(ByteField{"private_data", 10, 222}, m.private_data);
}

// Table 108, REJ.
template <typename M, typename Visit>
  requires Is<M, RejMessage>
void for_each_field(M& m, Visit&& visit) {
  visit(BitField{"local_comm_id", 0, 0, 32}, m.local_comm_id);
  visit(BitField{"remote_comm_id", 4, 0, 32}, m.remote_comm_id);
  visit(BitField{"message_rejected", 8, 0, 2}, m.message_rejected);
  visit(BitField{"reject_info_length", 9, 0, 7}, m.reject_info_length);
  visit(BitField{"reason", 10, 0, 16}, m.reason);
  visit(ByteField{"ari", 12, 72}, m.ari);
  visit(ByteField{"private_data", 84, 148}, m.private_data);
}

// Table 110, REP. The ECE vendor ID takes the reserved byte after each of
// the three 24-bit fields, most significant byte first.
template <typename M, typename Visit>
  requires Is<M, RepMessage>
void for_each_field(M& m, Visit&& visit) {
  visit(BitField{"local_comm_id", 0, 0, 32}, m.local_comm_id);
  visit(BitField{"remote_comm_id", 4, 0, 32}, m.remote_comm_id);
  visit(BitField{"local_qkey", 8, 0, 32}, m.local_qkey);
  visit(BitField{"local_qpn", 12, 0, 24}, m.local_qpn);
  visit(BitField{"local_eecn", 16, 0, 24}, m.local_eecn);
  visit(BitField{"starting_psn", 20, 0, 24}, m.starting_psn);
  visit(SplitField{"vendor_id", {"vendor_id", 15, 0, 8}, {"vendor_id", 19, 0, 8},
                   {"vendor_id", 23, 0, 8}},
        m.vendor_id);
  visit(BitField{"responder_resources", 24, 0, 8}, m.responder_resources);
  visit(BitField{"initiator_depth", 25, 0, 8}, m.initiator_depth);
  visit(BitField{"target_ack_delay", 26, 0, 5}, m.target_ack_delay);
  visit(BitField{"failover_accepted", 26, 5, 2}, m.failover_accepted);
  visit(BitField{"end_to_end_flow_control", 26, 7, 1}, m.end_to_end_flow_control);
  visit(BitField{"rnr_retry_count", 27, 0, 3}, m.rnr_retry_count);
  visit(BitField{"srq", 27, 3, 1}, m.srq);
  visit(BitField{"local_ca_guid", 28, 0, 64}, m.local_ca_guid);
  visit(ByteField{"private_data", 36, 196}, m.private_data);
}

// Table 111, RTU, and table 113, DREP: the same shape.
template <typename M, typename Visit>
  requires(Is<M, RtuMessage> || Is<M, DrepMessage>)
void for_each_field(M& m, Visit&& visit) {
  visit(BitField{"local_comm_id", 0, 0, 32}, m.local_comm_id);
  visit(BitField{"remote_comm_id", 4, 0, 32}, m.remote_comm_id);
  visit(ByteField{"private_data", 8, 224}, m.private_data);
}

// Table 112, DREQ.
template <typename M, typename Visit>
  requires Is<M, DreqMessage>
void for_each_field(M& m, Visit&& visit) {
  visit(BitField{"local_comm_id", 0, 0, 32}, m.local_comm_id);
  visit(BitField{"remote_comm_id", 4, 0, 32}, m.remote_comm_id);
  visit(BitField{"remote_qpn_eecn", 8, 0, 24}, m.remote_qpn_eecn);
  visit(ByteField{"private_data", 12, 220}, m.private_data);
}

// Table 119, SIDR_REQ.
template <typename M, typename Visit>
  requires Is<M, SidrReqMessage>
void for_each_field(M& m, Visit&& visit) {
  visit(BitField{"request_id", 0, 0, 32}, m.request_id);
  visit(BitField{"pkey", 4, 0, 16}, m.pkey);
  visit(BitField{"service_id", 8, 0, 64}, m.service_id);
  visit(ByteField{"private_data", 16, 216}, m.private_data);
}

// Table 120, SIDR_REP. The ECE vendor ID: 16 bits at byte 6, 8 at byte 11.
template <typename M, typename Visit>
  requires Is<M, SidrRepMessage>
void for_each_field(M& m, Visit&& visit) {
  visit(BitField{"request_id", 0, 0, 32}, m.request_id);
  visit(BitField{"status", 4, 0, 8}, m.status);
  visit(BitField{"additional_info_length", 5, 0, 8}, m.additional_info_length);
  visit(SplitField{"vendor_id", {"vendor_id", 6, 0, 16}, {"vendor_id", 0, 0, 0},
                   {"vendor_id", 11, 0, 8}},
        m.vendor_id);
  visit(BitField{"qpn", 8, 0, 24}, m.qpn);
  visit(BitField{"service_id", 12, 0, 64}, m.service_id);
  visit(BitField{"qkey", 20, 0, 32}, m.qkey);
  visit(ByteField{"additional_info", 24, 72}, m.additional_info);
  visit(ByteField{"private_data", 96, 136}, m.private_data);
}

}  // namespace softverbs::cm::layout
