// Shared by the CM tests: one message of each kind with a distinct,
// non-trivial value in every field. Values of packed fields are
// asymmetric bit patterns (0x16 = 10110 in a 5-bit field) so that a
// shifted, reversed or misplaced field shows up as a wrong byte.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "emulator/cm/cm_messages.h"

namespace softverbs::cm::testing {

// Fills `bytes` with a pattern that differs per `seed`.
template <size_t N>
std::array<uint8_t, N> pattern(uint8_t seed) {
  std::array<uint8_t, N> bytes;
  for (size_t i = 0; i < N; ++i) bytes[i] = static_cast<uint8_t>(seed + 7 * i);
  return bytes;
}

// Bytes first, first + 1, ...
inline Gid ramp_gid(uint8_t first) {
  Gid gid;
  for (size_t i = 0; i < gid.size(); ++i) gid[i] = static_cast<uint8_t>(first + i);
  return gid;
}

inline ReqMessage sample_req() {
  ReqMessage m;
  m.local_comm_id = 0x11223344;
  m.vendor_id = 0x0002c9;
  m.service_id = 0x0000000001061f90;  // RDMA_PS_TCP, port 8080
  m.local_ca_guid = 0x0102030405060708;
  m.local_qkey = 0xcafef00d;
  m.local_qpn = 0x123456;
  m.responder_resources = 0x10;
  m.local_eecn = 0x654321;
  m.initiator_depth = 0x08;
  m.remote_eecn = 0x0fedcb;
  m.remote_cm_response_timeout = 0x16;
  m.transport_service_type = TransportServiceType::kUc;
  m.end_to_end_flow_control = true;
  m.starting_psn = 0xabcdef;
  m.local_cm_response_timeout = 0x13;
  m.retry_count = 6;
  m.pkey = 0x8001;
  m.path_mtu = 4;
  m.rdc_exists = true;
  m.rnr_retry_count = 5;
  m.max_cm_retries = 0xb;
  m.srq = true;
  m.extended_transport_type = 1;
  m.primary_path = {.local_port_lid = 0x1234, .remote_port_lid = 0x5678,
                    .local_port_gid = ramp_gid(0xa0), .remote_port_gid = ramp_gid(0xb0),
                    .flow_label = 0xabcde, .packet_rate = 0x2a, .traffic_class = 0x5c,
                    .hop_limit = 0x40, .sl = 0xa, .subnet_local = true,
                    .local_ack_timeout = 0x12};
  m.alternate_path = {.local_port_lid = 0x9abc, .remote_port_lid = 0xdef0,
                      .local_port_gid = ramp_gid(0xc0), .remote_port_gid = ramp_gid(0xd0),
                      .flow_label = 0x13579, .packet_rate = 0x15, .traffic_class = 0xa3,
                      .hop_limit = 0x07, .sl = 0x5, .subnet_local = false,
                      .local_ack_timeout = 0x0e};
  m.private_data = pattern<ReqMessage::kPrivateDataBytes>(0x01);
  return m;
}

inline MraMessage sample_mra() {
  MraMessage m;
  m.local_comm_id = 0xaabbccdd;
  m.remote_comm_id = 0x12345678;
  m.message_mraed = MessageRef::kRep;
  m.service_timeout = 0x1d;
  m.private_data = pattern<MraMessage::kPrivateDataBytes>(0x02);
  return m;
}

inline RejMessage sample_rej() {
  RejMessage m;
  m.local_comm_id = 0x0a0b0c0d;
  m.remote_comm_id = 0x01020304;
  m.message_rejected = MessageRef::kOther;
  m.reject_info_length = 37;
  m.reason = RejectReason::kConsumerDefined;
  m.ari = pattern<RejMessage::kAriBytes>(0x03);
  m.private_data = pattern<RejMessage::kPrivateDataBytes>(0x04);
  return m;
}

inline RepMessage sample_rep() {
  RepMessage m;
  m.local_comm_id = 0x01020304;
  m.remote_comm_id = 0x05060708;
  m.local_qkey = 0x0badcafe;
  m.local_qpn = 0x3456ab;
  m.local_eecn = 0x102030;
  m.starting_psn = 0x998877;
  m.responder_resources = 0x04;
  m.initiator_depth = 0x03;
  m.target_ack_delay = 0x11;
  m.failover_accepted = 2;
  m.end_to_end_flow_control = true;
  m.rnr_retry_count = 6;
  m.srq = true;
  m.local_ca_guid = 0xf0e0d0c0b0a09080;
  m.vendor_id = 0xc1c2c3;
  m.private_data = pattern<RepMessage::kPrivateDataBytes>(0x05);
  return m;
}

inline RtuMessage sample_rtu() {
  RtuMessage m;
  m.local_comm_id = 0x31323334;
  m.remote_comm_id = 0x41424344;
  m.private_data = pattern<RtuMessage::kPrivateDataBytes>(0x06);
  return m;
}

inline DreqMessage sample_dreq() {
  DreqMessage m;
  m.local_comm_id = 0xdeadbeef;
  m.remote_comm_id = 0xfeedface;
  m.remote_qpn_eecn = 0x7a7b7c;
  m.private_data = pattern<DreqMessage::kPrivateDataBytes>(0x07);
  return m;
}

inline DrepMessage sample_drep() {
  DrepMessage m;
  m.local_comm_id = 0x51525354;
  m.remote_comm_id = 0x61626364;
  m.private_data = pattern<DrepMessage::kPrivateDataBytes>(0x08);
  return m;
}

inline SidrReqMessage sample_sidr_req() {
  SidrReqMessage m;
  m.request_id = 0x76543210;
  m.pkey = 0x7fff;
  m.service_id = 0x0000000001113039;  // RDMA_PS_UDP, port 12345
  m.private_data = pattern<SidrReqMessage::kPrivateDataBytes>(0x09);
  return m;
}

inline SidrRepMessage sample_sidr_rep() {
  SidrRepMessage m;
  m.request_id = 0x76543210;
  m.status = SidrStatus::kRedirect;
  m.additional_info_length = 0x30;
  m.vendor_id = 0xa1b2c3;
  m.qpn = 0x456789;
  m.service_id = 0x00000000013f0457;
  m.qkey = 0x01234567;
  m.additional_info = pattern<SidrRepMessage::kAdditionalInfoBytes>(0x0a);
  m.private_data = pattern<SidrRepMessage::kPrivateDataBytes>(0x0b);
  return m;
}

}  // namespace softverbs::cm::testing
