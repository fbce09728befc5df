// Device and port attributes as the soft HCA reports them. Plain numbers and
// flags with IBTA meaning; the provider maps them to ibv_device_attr et al.
#pragma once

#include <cstdint>
#include <string>

#include "emulator/host/device_config.h"
#include "emulator/types.h"
#include "emulator/wire/shm_registry_layout.h"

namespace softverbs {

// Limits of the soft HCA; the provider's argument checks use these too.
constexpr uint32_t kMaxSge = 32;
constexpr uint32_t kMaxInlineData = 512;
constexpr uint32_t kMaxQpWr = 16384;
constexpr uint32_t kMaxCqe = 1u << 20;
constexpr uint32_t kMaxRdAtomic = 16;
constexpr uint64_t kMaxMrSize = ~0ull;
constexpr uint32_t kMaxMsgSize = 1u << 31;
constexpr uint16_t kPkeyTableLen = 1;
constexpr uint16_t kDefaultPkey = 0xffff;
constexpr uint32_t kGidTableLen = 16;
// Completion timestamps count nanoseconds: a 1 GHz clock, 64 bits wide.
constexpr uint64_t kHcaCoreClockKhz = 1'000'000;
constexpr uint64_t kCompletionTimestampMask = ~0ull;
// CQ moderation limits (16-bit count, period in microseconds).
constexpr uint16_t kMaxCqModerationCount = 0xffff;
constexpr uint16_t kMaxCqModerationPeriodUs = 4095;

// Device memory an open device offers (mlx5's MEMIC is of this order).
constexpr uint64_t kMaxDeviceMemory = 256 * 1024;

enum class AtomicCapability : uint8_t { kNone, kHca, kGlobal };

// Which operations may use on-demand MRs, per transport.
enum OdpOperation : uint32_t {
  kOdpSend = 1u << 0,
  kOdpRecv = 1u << 1,
  kOdpWrite = 1u << 2,
  kOdpRead = 1u << 3,
  kOdpAtomic = 1u << 4,
  kOdpSrqRecv = 1u << 5,
  kOdpFlush = 1u << 6,
  kOdpAtomicWrite = 1u << 7,
};

// Every access goes through the same checked copy whatever the MR, so any
// operation a transport has works on on-demand MRs, implicit ones too.
struct OdpCapabilities {
  bool supported = true;
  bool implicit = true;
  uint32_t rc = kOdpSend | kOdpRecv | kOdpWrite | kOdpRead | kOdpAtomic | kOdpSrqRecv |
                kOdpFlush | kOdpAtomicWrite;
  uint32_t uc = kOdpSend | kOdpRecv | kOdpWrite | kOdpSrqRecv;
  uint32_t ud = kOdpSend | kOdpRecv | kOdpSrqRecv;
  // An XRC target receives only through SRQs.
  uint32_t xrc = kOdpSend | kOdpWrite | kOdpRead | kOdpAtomic | kOdpSrqRecv | kOdpFlush |
                 kOdpAtomicWrite;
};

struct DeviceAttributes {
  std::string fw_ver;
  uint64_t node_guid = 0;       // host byte order
  uint64_t sys_image_guid = 0;  // host byte order
  uint64_t max_mr_size = kMaxMrSize;
  uint64_t page_size_cap = 0;
  uint32_t vendor_id = 0;
  uint32_t vendor_part_id = 0;
  uint32_t hw_ver = 0;
  uint32_t max_qp = kMaxQp;
  uint32_t max_qp_wr = kMaxQpWr;
  uint32_t max_sge = kMaxSge;
  uint32_t max_sge_rd = kMaxSge;
  uint32_t max_cq = kMaxCq;
  uint32_t max_cqe = kMaxCqe;
  uint32_t max_mr = kMaxMr;
  uint32_t max_pd = kMaxPd;
  uint32_t max_qp_rd_atom = kMaxRdAtomic;
  uint32_t max_res_rd_atom = 0;
  uint32_t max_qp_init_rd_atom = kMaxRdAtomic;
  AtomicCapability atomic_cap = AtomicCapability::kHca;
  uint32_t max_mw = kMaxMw;
  uint32_t max_srq = kMaxSrq;
  uint32_t max_srq_wr = kMaxQpWr;
  uint32_t max_srq_sge = kMaxSge;
  uint16_t max_pkeys = kPkeyTableLen;
  uint8_t local_ca_ack_delay = 15;
  uint8_t phys_port_cnt = 1;
  uint32_t max_ah = kMaxAh;
  // Limits of the host's table of attachments, for all processes together.
  uint32_t max_mcast_grp = kMaxMulticastGroups;
  uint32_t max_mcast_qp_attach = kMaxMulticastQpsPerGroup;
  uint32_t max_inline_data = kMaxInlineData;
  uint64_t hca_core_clock_khz = kHcaCoreClockKhz;
  uint64_t completion_timestamp_mask = kCompletionTimestampMask;
  uint16_t max_cq_moderation_count = kMaxCqModerationCount;
  uint16_t max_cq_moderation_period_us = kMaxCqModerationPeriodUs;
  uint64_t max_dm_size = kMaxDeviceMemory;
  OdpCapabilities odp;
  // Capabilities with IBTA meaning.
  bool cap_bad_pkey_cntr = true;
  bool cap_bad_qkey_cntr = true;
  bool cap_sys_image_guid = true;
  bool cap_rc_rnr_nak_gen = true;
  bool cap_port_active_event = true;
  bool cap_change_phy_port = false;
  // Alternate paths and their migration (path_migration.h): InfiniBand only,
  // as the kernel refuses alternate paths on RoCE.
  bool cap_auto_path_mig = false;
  bool cap_srq_resize = true;
  bool cap_mem_window = true;
  // Type 2 windows are of type 2B (tied to a QP and its PD),
  // as rxe's and mlx5's are.
  bool cap_mem_window_type_2b = true;
  bool cap_xrc = true;
  // The memory placement extensions (IBTA annex A19): ATOMIC WRITE, and
  // FLUSH to global visibility (no soft MR is persistent memory).
  bool cap_atomic_write = true;
  bool cap_flush_global = true;
};

enum class PortState : uint8_t { kNop, kDown, kInit, kArmed, kActive, kActiveDefer };

struct PortAttributes {
  PortState state = PortState::kActive;
  Mtu max_mtu = Mtu::k4096;
  Mtu active_mtu = Mtu::k4096;
  uint32_t gid_tbl_len = kGidTableLen;
  uint32_t max_msg_sz = kMaxMsgSize;
  uint32_t bad_pkey_cntr = 0;
  uint32_t qkey_viol_cntr = 0;
  uint16_t pkey_tbl_len = kPkeyTableLen;
  uint16_t lid = 0;
  uint16_t sm_lid = 0;
  uint8_t lmc = 0;
  uint8_t max_vl_num = 1;  // IBTA encoding: 1 = VL0 only
  uint8_t sm_sl = 0;
  uint8_t subnet_timeout = 18;
  uint8_t init_type_reply = 0;
  uint8_t active_width = 2;  // IBTA encoding: 4x
  uint8_t active_speed = 32; // IBTA encoding: EDR (25 Gb/s per lane)
  uint8_t phys_state = 5;    // LinkUp
  LinkLayer link_layer = LinkLayer::kInfiniBand;
  // Port capability bits with IBTA meaning.
  bool cap_sm = false;
  bool cap_is_sm_disabled = false;
  bool cap_sys_image_guid_supported = true;
  bool cap_pkey_sw_ext_port_trap = false;
  bool cap_extended_speeds = false;
  bool cap_cm_supported = false;
  bool cap_device_mgmt = false;
  bool cap_vendor_class = false;
  bool cap_ip_based_gids = false;
};

}  // namespace softverbs
