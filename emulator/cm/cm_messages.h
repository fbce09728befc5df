// The Communication Manager's messages (IBTA Vol 1, chapter 12) as plain
// values in host order. Byte order and bit packing belong to the codec
// (cm_codec.h); where each field sits is written down once, in
// cm_message_layout.h.
//
// Widths are the wire's: a field narrower than its C++ type (24-bit QPNs,
// 5-bit timeouts...) must hold a value that fits, or encoding fails. The
// private data of each message has its fixed size on the wire; a shorter
// payload is padded with zeros by the sender and the receiver cannot tell.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <variant>

namespace softverbs::cm {

// A 128-bit GID, network byte order.
using Gid = std::array<uint8_t, 16>;

// MAD attribute IDs of the CM messages (IBTA Vol 1, chapter 12).
enum class AttributeId : uint16_t {
  kReq = 0x0010,
  kMra = 0x0011,
  kRej = 0x0012,
  kRep = 0x0013,
  kRtu = 0x0014,
  kDreq = 0x0015,
  kDrep = 0x0016,
  kSidrReq = 0x0017,
  kSidrRep = 0x0018,
};

// "REQ", "MRA", ...; "unknown" for anything else.
const char* message_name(AttributeId id);

// REQ's Transport Service Type (2 bits). kExtended defers to the Extended
// Transport Type field (XRC is extended type 1).
enum class TransportServiceType : uint8_t { kRc = 0, kUc = 1, kRd = 2, kExtended = 3 };
constexpr uint8_t kExtendedTransportXrc = 1;

// Which message an MRA acknowledges or a REJ refuses (2 bits). The value 2
// is LAP for an MRA and "other / none" for a REJ.
enum class MessageRef : uint8_t { kReq = 0, kRep = 1, kOther = 2 };

// REJ reasons (IBTA table "Reject Reason"; the values Linux's ib_cm.h uses).
enum class RejectReason : uint16_t {
  kNoQp = 1,
  kNoEec = 2,
  kNoResources = 3,
  kTimeout = 4,
  kUnsupportedReq = 5,
  kInvalidCommId = 6,
  kInvalidCommInstance = 7,
  kInvalidServiceId = 8,
  kInvalidTransportType = 9,
  kStaleConnection = 10,
  kRdcNotExist = 11,
  kInvalidGid = 12,
  kInvalidLid = 13,
  kInvalidSl = 14,
  kInvalidTrafficClass = 15,
  kInvalidHopLimit = 16,
  kInvalidPacketRate = 17,
  kInvalidAltGid = 18,
  kInvalidAltLid = 19,
  kInvalidAltSl = 20,
  kInvalidAltTrafficClass = 21,
  kInvalidAltHopLimit = 22,
  kInvalidAltPacketRate = 23,
  kPortCmRedirect = 24,
  kPortRedirect = 25,
  kInvalidMtu = 26,
  kInsufficientRespResources = 27,
  kConsumerDefined = 28,
  kInvalidRnrRetry = 29,
  kDuplicateLocalCommId = 30,
  kInvalidClassVersion = 31,
  kInvalidFlowLabel = 32,
  kInvalidAltFlowLabel = 33,
  kVendorOptionNotSupported = 35,
};

// SIDR_REP status.
enum class SidrStatus : uint8_t {
  kSuccess = 0,
  kUnsupportedServiceId = 1,
  kRejected = 2,
  kNoQp = 3,
  kRedirect = 4,       // additional information holds a ClassPortInfo
  kUnsupportedVersion = 5,
};

// One path of a REQ (primary or alternate): 44 bytes on the wire.
struct CmPath {
  uint16_t local_port_lid = 0;
  uint16_t remote_port_lid = 0;
  Gid local_port_gid{};
  Gid remote_port_gid{};
  uint32_t flow_label = 0;      // 20 bits
  uint8_t packet_rate = 0;      // 6 bits, IBTA static rate code
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 0;
  uint8_t sl = 0;               // 4 bits
  bool subnet_local = false;
  uint8_t local_ack_timeout = 0;  // 5 bits, 4.096 us * 2^n

  bool operator==(const CmPath&) const = default;
};

// REQ: request for communication.
struct ReqMessage {
  static constexpr AttributeId kAttributeId = AttributeId::kReq;
  static constexpr size_t kPrivateDataBytes = 92;

  uint32_t local_comm_id = 0;
  uint32_t vendor_id = 0;  // 24 bits, ECE (IBTA comment #9434); 0 without ECE
  uint64_t service_id = 0;
  uint64_t local_ca_guid = 0;  // as a number: the GUID's bytes big-endian
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;                // 24 bits
  uint8_t responder_resources = 0;
  uint32_t local_eecn = 0;               // 24 bits, RD only
  uint8_t initiator_depth = 0;
  uint32_t remote_eecn = 0;              // 24 bits, RD only
  uint8_t remote_cm_response_timeout = 0;  // 5 bits
  TransportServiceType transport_service_type = TransportServiceType::kRc;
  bool end_to_end_flow_control = false;
  uint32_t starting_psn = 0;             // 24 bits
  uint8_t local_cm_response_timeout = 0;  // 5 bits
  uint8_t retry_count = 0;               // 3 bits
  uint16_t pkey = 0;
  uint8_t path_mtu = 0;                  // 4 bits: 1 = 256 ... 5 = 4096
  bool rdc_exists = false;
  uint8_t rnr_retry_count = 0;           // 3 bits
  uint8_t max_cm_retries = 0;            // 4 bits
  bool srq = false;
  uint8_t extended_transport_type = 0;   // 3 bits
  CmPath primary_path;
  CmPath alternate_path;  // all zero when there is none
  std::array<uint8_t, kPrivateDataBytes> private_data{};

  bool operator==(const ReqMessage&) const = default;
};

// MRA: message receipt acknowledgement ("give me more time").
struct MraMessage {
  static constexpr AttributeId kAttributeId = AttributeId::kMra;
  static constexpr size_t kPrivateDataBytes = 222;

  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  MessageRef message_mraed = MessageRef::kReq;
  uint8_t service_timeout = 0;  // 5 bits
  std::array<uint8_t, kPrivateDataBytes> private_data{};

  bool operator==(const MraMessage&) const = default;
};

// REJ: reject.
struct RejMessage {
  static constexpr AttributeId kAttributeId = AttributeId::kRej;
  static constexpr size_t kPrivateDataBytes = 148;
  static constexpr size_t kAriBytes = 72;

  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  MessageRef message_rejected = MessageRef::kReq;
  uint8_t reject_info_length = 0;  // 7 bits; valid bytes of `ari`, at most 72
  RejectReason reason = RejectReason::kConsumerDefined;
  std::array<uint8_t, kAriBytes> ari{};  // additional rejection information
  std::array<uint8_t, kPrivateDataBytes> private_data{};

  bool operator==(const RejMessage&) const = default;
};

// REP: reply to a REQ.
struct RepMessage {
  static constexpr AttributeId kAttributeId = AttributeId::kRep;
  static constexpr size_t kPrivateDataBytes = 196;

  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t local_qkey = 0;
  uint32_t local_qpn = 0;           // 24 bits
  uint32_t local_eecn = 0;          // 24 bits, RD only
  uint32_t starting_psn = 0;        // 24 bits
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;     // 5 bits
  uint8_t failover_accepted = 0;    // 2 bits
  bool end_to_end_flow_control = false;
  uint8_t rnr_retry_count = 0;      // 3 bits
  bool srq = false;
  uint64_t local_ca_guid = 0;
  uint32_t vendor_id = 0;  // 24 bits, ECE; stored in three reserved bytes
  std::array<uint8_t, kPrivateDataBytes> private_data{};

  bool operator==(const RepMessage&) const = default;
};

// RTU: ready to use.
struct RtuMessage {
  static constexpr AttributeId kAttributeId = AttributeId::kRtu;
  static constexpr size_t kPrivateDataBytes = 224;

  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kPrivateDataBytes> private_data{};

  bool operator==(const RtuMessage&) const = default;
};

// DREQ: request for communication release (disconnect).
struct DreqMessage {
  static constexpr AttributeId kAttributeId = AttributeId::kDreq;
  static constexpr size_t kPrivateDataBytes = 220;

  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  uint32_t remote_qpn_eecn = 0;  // 24 bits
  std::array<uint8_t, kPrivateDataBytes> private_data{};

  bool operator==(const DreqMessage&) const = default;
};

// DREP: reply to a DREQ.
struct DrepMessage {
  static constexpr AttributeId kAttributeId = AttributeId::kDrep;
  static constexpr size_t kPrivateDataBytes = 224;

  uint32_t local_comm_id = 0;
  uint32_t remote_comm_id = 0;
  std::array<uint8_t, kPrivateDataBytes> private_data{};

  bool operator==(const DrepMessage&) const = default;
};

// SIDR_REQ: service ID resolution request (UD peers).
struct SidrReqMessage {
  static constexpr AttributeId kAttributeId = AttributeId::kSidrReq;
  static constexpr size_t kPrivateDataBytes = 216;

  uint32_t request_id = 0;
  uint16_t pkey = 0;
  uint64_t service_id = 0;
  std::array<uint8_t, kPrivateDataBytes> private_data{};

  bool operator==(const SidrReqMessage&) const = default;
};

// SIDR_REP: service ID resolution response.
struct SidrRepMessage {
  static constexpr AttributeId kAttributeId = AttributeId::kSidrRep;
  static constexpr size_t kPrivateDataBytes = 136;
  static constexpr size_t kAdditionalInfoBytes = 72;

  uint32_t request_id = 0;
  SidrStatus status = SidrStatus::kSuccess;
  uint8_t additional_info_length = 0;  // valid bytes of additional_info, <= 72
  uint32_t vendor_id = 0;  // 24 bits, ECE; stored in two reserved places
  uint32_t qpn = 0;        // 24 bits
  uint64_t service_id = 0;
  uint32_t qkey = 0;
  // A ClassPortInfo when status is kRedirect, else status-specific detail.
  std::array<uint8_t, kAdditionalInfoBytes> additional_info{};
  std::array<uint8_t, kPrivateDataBytes> private_data{};

  bool operator==(const SidrRepMessage&) const = default;
};

// Any CM message. The alternatives are in attribute ID order (0x10 + index);
// the codec relies on it.
using CmMessage =
    std::variant<ReqMessage, MraMessage, RejMessage, RepMessage, RtuMessage,
                 DreqMessage, DrepMessage, SidrReqMessage, SidrRepMessage>;

AttributeId attribute_id(const CmMessage& message);

}  // namespace softverbs::cm
