// The soft HCA's own vocabulary. Nothing here knows the verbs ABI: the
// provider translates verbs structs into these and back.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace softverbs {

class Ah;

// Errors are values: 0 on success, else a positive errno (EINVAL, ENOMEM, ...).
using Errno = int;

// kXrcSend and kXrcRecv are the two halves of an XRC connection (IBTA
// 9.8.4 / 11.2.4): the initiator sends, the target only responds and takes
// each message's receive WQE from the XRC SRQ the packet names.
enum class QpType : uint8_t { kRc, kUc, kUd, kXrcSend, kXrcRecv };

// "RC", "UC", "UD", "XRC_INI", "XRC_TGT" (qp_state.cc).
const char* to_string(QpType type);

constexpr bool is_xrc(QpType t) { return t == QpType::kXrcSend || t == QpType::kXrcRecv; }
// Acknowledged, retransmitted, READs and atomics: RC and both XRC halves.
constexpr bool is_reliable(QpType t) { return t == QpType::kRc || is_xrc(t); }

enum class QpState : uint8_t { kReset, kInit, kRtr, kRts, kSqd, kSqe, kErr };

const char* to_string(QpState state);

enum class Mtu : uint8_t { k256 = 1, k512 = 2, k1024 = 3, k2048 = 4, k4096 = 5 };

constexpr uint32_t mtu_bytes(Mtu mtu) { return 128u << static_cast<uint8_t>(mtu); }

// Access rights of an MR or a QP (same meaning as the IBTA's access flags).
enum Access : uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
  kAccessRemoteAtomic = 1u << 3,
  kAccessMwBind = 1u << 4,  // an MR memory windows may be bound to
  // FLUSH targets (IBTA annex A19): global visibility, persistence.
  kAccessFlushGlobal = 1u << 5,
  kAccessFlushPersistent = 1u << 6,
};

// A 128-bit GID in network byte order.
using Gid = std::array<uint8_t, 16>;

// The GID of a multicast group: ff00::/8, or an IPv4 multicast address
// mapped into IPv6 (RoCE).
bool is_multicast_gid(const Gid& gid);
// IBTA 4.1.1: multicast LIDs are 0xC000-0xFFFE (0xFFFF is the permissive LID).
bool is_multicast_lid(uint16_t lid);

// Where a QP's packets go: the address vector of the IBTA.
struct AddressVector {
  uint16_t dlid = 0;
  uint8_t sl = 0;
  uint8_t src_path_bits = 0;
  uint8_t static_rate = 0;
  bool is_global = false;
  Gid dgid{};
  uint32_t flow_label = 0;
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 0;
  uint8_t traffic_class = 0;
  uint8_t port_num = 1;
};

// Which QpAttributes fields a modify carries. Same meaning as the IBTA's
// attribute list for Modify QP.
enum QpAttrMask : uint32_t {
  kQpAttrState = 1u << 0,
  kQpAttrCurState = 1u << 1,
  kQpAttrEnSqdAsyncNotify = 1u << 2,
  kQpAttrAccessFlags = 1u << 3,
  kQpAttrPkeyIndex = 1u << 4,
  kQpAttrPort = 1u << 5,
  kQpAttrQkey = 1u << 6,
  kQpAttrAv = 1u << 7,
  kQpAttrPathMtu = 1u << 8,
  kQpAttrTimeout = 1u << 9,
  kQpAttrRetryCnt = 1u << 10,
  kQpAttrRnrRetry = 1u << 11,
  kQpAttrRqPsn = 1u << 12,
  kQpAttrMaxQpRdAtomic = 1u << 13,
  kQpAttrAltPath = 1u << 14,
  kQpAttrMinRnrTimer = 1u << 15,
  kQpAttrSqPsn = 1u << 16,
  kQpAttrMaxDestRdAtomic = 1u << 17,
  kQpAttrPathMigState = 1u << 18,
  kQpAttrCap = 1u << 19,
  kQpAttrDestQpn = 1u << 20,
};

struct QpCapabilities {
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_recv_sge = 0;
  uint32_t max_inline_data = 0;
};

// Everything Modify/Query QP can carry.
struct QpAttributes {
  QpState state = QpState::kReset;
  QpState cur_state = QpState::kReset;
  uint32_t access_flags = 0;  // Access bits
  uint16_t pkey_index = 0;
  uint8_t port_num = 1;
  uint32_t qkey = 0;
  AddressVector av;
  AddressVector alt_av;
  Mtu path_mtu = Mtu::k1024;
  uint8_t timeout = 0;
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;
  uint32_t rq_psn = 0;
  uint32_t sq_psn = 0;
  uint8_t max_rd_atomic = 0;
  uint8_t max_dest_rd_atomic = 0;
  uint8_t min_rnr_timer = 0;
  uint32_t dest_qp_num = 0;
  bool en_sqd_async_notify = false;
  bool sq_draining = false;
  uint8_t path_mig_state = 0;
  uint16_t alt_pkey_index = 0;
  uint8_t alt_port_num = 0;
  uint8_t alt_timeout = 0;
  QpCapabilities cap;
};

// One scatter/gather element: local virtual address, length, lkey.
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

enum class WrOpcode : uint8_t {
  kSend,
  kSendWithImm,
  kRdmaWrite,
  kRdmaWriteWithImm,
  kRdmaRead,
  kAtomicCmpSwp,
  kAtomicFetchAdd,
  kSendWithInv,
  // Memory placement extensions (IBTA annex A19): RC and XRC only.
  kAtomicWrite,
  kFlush,
  // Local operations: executed in the send queue's order, no packet.
  kBindMw,
  kLocalInv,
};

// Inline data is a SEND's or an RDMA WRITE's payload (IBTA 11.4.1.1). A READ
// or an atomic has its local SGEs receive data, so the inline flag means
// nothing to it: its SGEs are used, lkeys checked, as without the flag.
// Binds and invalidations move no bytes of the application's.
constexpr bool is_local_operation(WrOpcode op) {
  return op == WrOpcode::kBindMw || op == WrOpcode::kLocalInv;
}

constexpr bool takes_inline_data(WrOpcode op) {
  return op != WrOpcode::kRdmaRead && op != WrOpcode::kAtomicCmpSwp &&
         op != WrOpcode::kAtomicFetchAdd && op != WrOpcode::kAtomicWrite &&
         op != WrOpcode::kFlush && !is_local_operation(op);
}

// FETH placement types (a set of these bits) and selectivity levels (IBTA
// annex A19).
enum FlushPlacement : uint8_t { kFlushGlobal = 1, kFlushPersistent = 2 };
enum FlushSelectivity : uint8_t { kFlushRange = 0, kFlushMr = 1 };
constexpr bool flush_placement_valid(uint8_t placement) {
  return placement != 0 && (placement & ~(kFlushGlobal | kFlushPersistent)) == 0;
}

enum WrFlags : uint32_t {
  kWrSignaled = 1u << 0,
  kWrSolicited = 1u << 1,
  kWrInline = 1u << 2,
  kWrFence = 1u << 3,
};

class Mw;

// What a bind of a memory window asks for (ibv_bind_mw(3), IBV_WR_BIND_MW).
struct MwBindRequest {
  const Mw* mw = nullptr;
  uint32_t mr_lkey = 0;  // the MR it is bound to; unused when length is 0
  uint64_t addr = 0;     // the window's first byte, in the MR's address space
  uint64_t length = 0;   // 0 unbinds a type 1 window
  uint32_t access = 0;   // the window's remote rights (Access)
  bool zero_based = false;
  bool by_verb = false;  // ibv_bind_mw (type 1), not a posted WR (type 2)
};

struct SendRequest {
  uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kSend;
  uint32_t flags = 0;  // WrFlags
  uint32_t imm_data = 0;  // network byte order, as carried in ImmDt
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  // Borrowed for the duration of the post call only: the emulator copies.
  std::span<const Sge> sges;
  // For kWrInline: the bytes gathered from the SGEs by the caller, copied at
  // post time (the caller may reuse its buffers as soon as post returns).
  std::span<const uint8_t> inline_data;
  // UD only: where the datagram goes. A Q_Key with its high bit set means
  // the QP's own Q_Key (IBTA 10.2.5).
  const Ah* ah = nullptr;
  uint32_t remote_qpn = 0;
  uint32_t remote_qkey = 0;
  // XRC initiator only: the XRC SRQ at the target that receives the message.
  uint32_t xrc_remote_srqn = 0;
  // kBindMw: the binding; `rkey` is the window's new R_Key. kLocalInv and
  // kSendWithInv: `rkey` is the R_Key to invalidate.
  MwBindRequest bind;
  // kAtomicWrite: the 8 bytes to place at remote_addr, as they lie in the
  // application's memory. kFlush: what to make durable (FlushPlacement),
  // and of what (FlushSelectivity): `flush_length` bytes at remote_addr,
  // or the whole MR.
  uint64_t atomic_write_data = 0;
  uint8_t flush_placement = 0;
  uint8_t flush_selectivity = 0;
  uint32_t flush_length = 0;
};

struct RecvRequest {
  uint64_t wr_id = 0;
  std::span<const Sge> sges;  // borrowed for the post call only
};

// Completion statuses, in the IBTA's terms.
enum class WcStatus : uint8_t {
  kSuccess,
  kLocLenErr,
  kLocQpOpErr,
  kLocEecOpErr,
  kLocProtErr,
  kWrFlushErr,
  kMwBindErr,
  kBadRespErr,
  kLocAccessErr,
  kRemInvReqErr,
  kRemAccessErr,
  kRemOpErr,
  kRetryExcErr,
  kRnrRetryExcErr,
  kLocRddViolErr,
  kRemInvRdReqErr,
  kRemAbortErr,
  kInvEecnErr,
  kInvEecStateErr,
  kFatalErr,
  kRespTimeoutErr,
  kGeneralErr,
};

enum class WcOpcode : uint8_t {
  kSend,
  kRdmaWrite,
  kRdmaRead,
  kCompSwap,
  kFetchAdd,
  kBindMw,
  kLocalInv,
  kAtomicWrite,
  kFlush,
  kRecv,
  kRecvRdmaWithImm,
};

enum WcFlags : uint32_t {
  kWcWithImm = 1u << 0,
  kWcGrh = 1u << 1,
  kWcWithInv = 1u << 2,
};

struct Completion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  uint32_t vendor_err = 0;
  uint32_t byte_len = 0;
  uint32_t imm_data = 0;  // network byte order
  uint32_t invalidated_rkey = 0;
  uint32_t qp_num = 0;
  uint32_t src_qp = 0;
  uint32_t wc_flags = 0;  // WcFlags
  uint16_t pkey_index = 0;
  uint16_t slid = 0;
  uint8_t sl = 0;
  uint8_t dlid_path_bits = 0;
  // When the CQ received it: the HCA clock (Clock::now_ns) and the wall
  // clock (ns since the epoch). Set only on CQs created to stamp them
  // (CqStamps), 0 elsewhere.
  uint64_t timestamp_ns = 0;
  uint64_t wallclock_ns = 0;
};

// What a CQ records in each completion it receives, besides the
// completion itself.
enum CqStamps : uint32_t {
  kStampTimestamp = 1u << 0,  // Completion::timestamp_ns
  kStampWallclock = 1u << 1,  // Completion::wallclock_ns
};

// Asynchronous events, in the IBTA's terms.
enum class AsyncEventType : uint8_t {
  kCqErr,
  kQpFatal,
  kQpReqErr,
  kQpAccessErr,
  kCommEst,
  kSqDrained,
  kPathMig,
  kPathMigErr,
  kDeviceFatal,
  kPortActive,
  kPortErr,
  kLidChange,
  kPkeyChange,
  kSmChange,
  kSrqErr,
  kSrqLimitReached,
  kQpLastWqeReached,
  kClientReregister,
  kGidChange,
};

}  // namespace softverbs
