// Device, port and GID attributes between the HCA's types and libibverbs'.
#include <algorithm>
#include <climits>
#include <cstring>

#include "provider/translate.h"
#include "provider/upstream_verbs.h"

namespace softverbs::provider {
namespace {

int saturate(uint64_t value) {
  return static_cast<int>(std::min<uint64_t>(value, INT_MAX));
}

// IsSMdisabled of the IBTA PortInfo CapabilityMask; verbs.h has no name for it.
constexpr uint32_t kPortIsSmDisabled = 1u << 10;

}  // namespace

// --- device and port -------------------------------------------------------

void to_ibv_device_attr(const DeviceAttributes& in, ibv_device_attr& out) {
  std::memset(&out, 0, sizeof(out));
  std::strncpy(out.fw_ver, in.fw_ver.c_str(), sizeof(out.fw_ver) - 1);
  out.node_guid = htobe64(in.node_guid);
  out.sys_image_guid = htobe64(in.sys_image_guid);
  out.max_mr_size = in.max_mr_size;
  out.page_size_cap = in.page_size_cap;
  out.vendor_id = in.vendor_id;
  out.vendor_part_id = in.vendor_part_id;
  out.hw_ver = in.hw_ver;
  out.max_qp = saturate(in.max_qp);
  out.max_qp_wr = saturate(in.max_qp_wr);
  unsigned int caps = 0;
  if (in.cap_bad_pkey_cntr) caps |= IBV_DEVICE_BAD_PKEY_CNTR;
  if (in.cap_bad_qkey_cntr) caps |= IBV_DEVICE_BAD_QKEY_CNTR;
  if (in.cap_sys_image_guid) caps |= IBV_DEVICE_SYS_IMAGE_GUID;
  if (in.cap_rc_rnr_nak_gen) caps |= IBV_DEVICE_RC_RNR_NAK_GEN;
  if (in.cap_port_active_event) caps |= IBV_DEVICE_PORT_ACTIVE_EVENT;
  if (in.cap_change_phy_port) caps |= IBV_DEVICE_CHANGE_PHY_PORT;
  if (in.cap_auto_path_mig) caps |= IBV_DEVICE_AUTO_PATH_MIG;
  if (in.cap_srq_resize) caps |= IBV_DEVICE_SRQ_RESIZE;
  if (in.cap_mem_window) caps |= IBV_DEVICE_MEM_WINDOW;
  if (in.cap_mem_window_type_2b) caps |= IBV_DEVICE_MEM_WINDOW_TYPE_2B;
  if (in.cap_xrc) caps |= IBV_DEVICE_XRC;
  out.device_cap_flags = caps;
  out.max_sge = saturate(in.max_sge);
  out.max_sge_rd = saturate(in.max_sge_rd);
  out.max_cq = saturate(in.max_cq);
  out.max_cqe = saturate(in.max_cqe);
  out.max_mr = saturate(in.max_mr);
  out.max_pd = saturate(in.max_pd);
  out.max_qp_rd_atom = saturate(in.max_qp_rd_atom);
  out.max_res_rd_atom = saturate(in.max_res_rd_atom);
  out.max_qp_init_rd_atom = saturate(in.max_qp_init_rd_atom);
  switch (in.atomic_cap) {
    case AtomicCapability::kNone: out.atomic_cap = IBV_ATOMIC_NONE; break;
    case AtomicCapability::kHca: out.atomic_cap = IBV_ATOMIC_HCA; break;
    case AtomicCapability::kGlobal: out.atomic_cap = IBV_ATOMIC_GLOB; break;
  }
  out.max_mw = saturate(in.max_mw);
  out.max_mcast_grp = saturate(in.max_mcast_grp);
  out.max_mcast_qp_attach = saturate(in.max_mcast_qp_attach);
  out.max_total_mcast_qp_attach =
      saturate(uint64_t{in.max_mcast_grp} * in.max_mcast_qp_attach);
  out.max_ah = saturate(in.max_ah);
  out.max_srq = saturate(in.max_srq);
  out.max_srq_wr = saturate(in.max_srq_wr);
  out.max_srq_sge = saturate(in.max_srq_sge);
  out.max_pkeys = in.max_pkeys;
  out.local_ca_ack_delay = in.local_ca_ack_delay;
  out.phys_port_cnt = in.phys_port_cnt;
}

namespace {

uint32_t to_ibv_odp_operations(uint32_t ops) {
  uint32_t out = 0;
  if (ops & kOdpSend) out |= IBV_ODP_SUPPORT_SEND;
  if (ops & kOdpRecv) out |= IBV_ODP_SUPPORT_RECV;
  if (ops & kOdpWrite) out |= IBV_ODP_SUPPORT_WRITE;
  if (ops & kOdpRead) out |= IBV_ODP_SUPPORT_READ;
  if (ops & kOdpAtomic) out |= IBV_ODP_SUPPORT_ATOMIC;
  if (ops & kOdpSrqRecv) out |= IBV_ODP_SUPPORT_SRQ_RECV;
  if (ops & kOdpFlush) out |= kIbvOdpSupportFlush;
  if (ops & kOdpAtomicWrite) out |= kIbvOdpSupportAtomicWrite;
  return out;
}

ibv_odp_caps to_ibv_odp_caps(const OdpCapabilities& in) {
  ibv_odp_caps out{};
  if (in.supported) out.general_caps |= IBV_ODP_SUPPORT;
  if (in.implicit) out.general_caps |= IBV_ODP_SUPPORT_IMPLICIT;
  out.per_transport_caps.rc_odp_caps = to_ibv_odp_operations(in.rc);
  out.per_transport_caps.uc_odp_caps = to_ibv_odp_operations(in.uc);
  out.per_transport_caps.ud_odp_caps = to_ibv_odp_operations(in.ud);
  return out;
}

}  // namespace

void to_ibv_device_attr_ex(const DeviceAttributes& in, ibv_device_attr_ex& out) {
  std::memset(&out, 0, sizeof(out));
  to_ibv_device_attr(in, out.orig_attr);
  out.device_cap_flags_ex = out.orig_attr.device_cap_flags;
  if (in.cap_atomic_write) out.device_cap_flags_ex |= kIbvDeviceAtomicWrite;
  if (in.cap_flush_global) out.device_cap_flags_ex |= kIbvDeviceFlushGlobal;
  out.phys_port_cnt_ex = in.phys_port_cnt;
  out.completion_timestamp_mask = in.completion_timestamp_mask;
  out.hca_core_clock = in.hca_core_clock_khz;
  out.cq_mod_caps.max_cq_count = in.max_cq_moderation_count;
  out.cq_mod_caps.max_cq_period = in.max_cq_moderation_period_us;
  out.max_dm_size = in.max_dm_size;
  out.odp_caps = to_ibv_odp_caps(in.odp);
  out.xrc_odp_caps = to_ibv_odp_operations(in.odp.xrc);
  // Everything else reads zero: no TSO, RSS, WQs, packet pacing, raw packet
  // offloads, tag matching or PCI atomics.
}

void to_ibv_port_attr(const PortAttributes& in, ibv_port_attr& out) {
  std::memset(&out, 0, sizeof(out));
  // PortState's values are the IBTA's, as are ibv_port_state's.
  out.state = static_cast<ibv_port_state>(in.state);
  out.max_mtu = to_ibv_mtu(in.max_mtu);
  out.active_mtu = to_ibv_mtu(in.active_mtu);
  out.gid_tbl_len = saturate(in.gid_tbl_len);
  uint32_t caps = 0;
  if (in.cap_sm) caps |= IBV_PORT_SM;
  if (in.cap_is_sm_disabled) caps |= kPortIsSmDisabled;
  if (in.cap_sys_image_guid_supported) caps |= IBV_PORT_SYS_IMAGE_GUID_SUP;
  if (in.cap_pkey_sw_ext_port_trap) caps |= IBV_PORT_PKEY_SW_EXT_PORT_TRAP_SUP;
  if (in.cap_extended_speeds) caps |= IBV_PORT_EXTENDED_SPEEDS_SUP;
  if (in.cap_cm_supported) caps |= IBV_PORT_CM_SUP;
  if (in.cap_device_mgmt) caps |= IBV_PORT_DEVICE_MGMT_SUP;
  if (in.cap_vendor_class) caps |= IBV_PORT_VENDOR_CLASS_SUP;
  if (in.cap_ip_based_gids) caps |= IBV_PORT_IP_BASED_GIDS;
  out.port_cap_flags = caps;
  out.max_msg_sz = in.max_msg_sz;
  out.bad_pkey_cntr = in.bad_pkey_cntr;
  out.qkey_viol_cntr = in.qkey_viol_cntr;
  out.pkey_tbl_len = in.pkey_tbl_len;
  out.lid = in.lid;
  out.sm_lid = in.sm_lid;
  out.lmc = in.lmc;
  out.max_vl_num = in.max_vl_num;
  out.sm_sl = in.sm_sl;
  out.subnet_timeout = in.subnet_timeout;
  out.init_type_reply = in.init_type_reply;
  out.active_width = in.active_width;
  out.active_speed = in.active_speed;
  out.phys_state = in.phys_state;
  if (in.link_layer == LinkLayer::kEthernet) {
    out.link_layer = IBV_LINK_LAYER_ETHERNET;
    out.flags = IBV_QPF_GRH_REQUIRED;  // RoCE carries a GRH in every packet
  } else {
    out.link_layer = IBV_LINK_LAYER_INFINIBAND;
  }
}

ibv_gid to_ibv_gid(const Gid& gid) {
  ibv_gid out;
  std::memcpy(out.raw, gid.data(), sizeof(out.raw));
  return out;
}

Gid from_ibv_gid(const ibv_gid& gid) {
  Gid out;
  std::memcpy(out.data(), gid.raw, out.size());
  return out;
}

bool is_zero_gid(const Gid& gid) {
  return std::all_of(gid.begin(), gid.end(), [](uint8_t b) { return b == 0; });
}

}  // namespace softverbs::provider
