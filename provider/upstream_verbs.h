// Names of the verbs ABI that rdma-core defines after the version these
// headers come from (Debian 12's rdma-core 44): the memory placement
// extensions' flush and atomic-write bits (rdma-core 47). Programs built
// against newer headers use these values, so the provider serves them.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>

namespace softverbs::provider {

inline constexpr int kIbvWrFlush = 14;                     // IBV_WR_FLUSH
inline constexpr int kIbvWcFlush = 8;                      // IBV_WC_FLUSH
inline constexpr uint64_t kIbvQpExWithFlush = 1ull << 11;  // IBV_QP_EX_WITH_FLUSH
inline constexpr unsigned kIbvAccessFlushGlobal = 1u << 8;      // IBV_ACCESS_FLUSH_GLOBAL
inline constexpr unsigned kIbvAccessFlushPersistent = 1u << 9;  // IBV_ACCESS_FLUSH_PERSISTENT
// ibv_device_attr_ex::device_cap_flags_ex (IB_UVERBS_DEVICE_*).
inline constexpr uint64_t kIbvDeviceFlushGlobal = 1ull << 38;
inline constexpr uint64_t kIbvDeviceAtomicWrite = 1ull << 40;
// ibv_odp_caps transport bits.
inline constexpr uint32_t kIbvOdpSupportFlush = 1u << 6;
inline constexpr uint32_t kIbvOdpSupportAtomicWrite = 1u << 7;

// struct ibv_qp_ex gained, after wr_atomic_write, this member: a program
// built against rdma-core 47 or later calls it through ibv_wr_flush().
using WrFlushFunction = void (*)(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr,
                                 size_t len, uint8_t type, uint8_t level);
inline constexpr size_t kWrFlushOffset = sizeof(ibv_qp_ex);

}  // namespace softverbs::provider
