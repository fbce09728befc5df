#include "harness/testsupport/completion_polling.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>

namespace softverbs::testsupport {

int drain_completions(ibv_cq* cq, std::vector<ibv_wc>& out) {
  std::array<ibv_wc, 16> batch{};
  int total = 0;
  for (;;) {
    int n = ibv_poll_cq(cq, static_cast<int>(batch.size()), batch.data());
    if (n < 0) return -1;
    out.insert(out.end(), batch.begin(), batch.begin() + n);
    total += n;
    if (n < static_cast<int>(batch.size())) return total;
  }
}

Errno poll_completions(ibv_cq* cq, size_t count, std::vector<ibv_wc>& out,
                       std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t received = 0;
  std::array<ibv_wc, 16> batch{};
  while (received < count) {
    int want = static_cast<int>(std::min(batch.size(), count - received));
    int n = ibv_poll_cq(cq, want, batch.data());
    if (n < 0) return EIO;
    out.insert(out.end(), batch.begin(), batch.begin() + n);
    received += static_cast<size_t>(n);
    if (n > 0) continue;
    if (std::chrono::steady_clock::now() >= deadline) return ETIMEDOUT;
    // Other processes share the cores; let them run (a soft peer may need
    // this core to answer).
    sched_yield();
  }
  return 0;
}

const char* wc_opcode_name(ibv_wc_opcode opcode) {
  switch (opcode) {
    case IBV_WC_SEND: return "IBV_WC_SEND";
    case IBV_WC_RDMA_WRITE: return "IBV_WC_RDMA_WRITE";
    case IBV_WC_RDMA_READ: return "IBV_WC_RDMA_READ";
    case IBV_WC_COMP_SWAP: return "IBV_WC_COMP_SWAP";
    case IBV_WC_FETCH_ADD: return "IBV_WC_FETCH_ADD";
    case IBV_WC_BIND_MW: return "IBV_WC_BIND_MW";
    case IBV_WC_LOCAL_INV: return "IBV_WC_LOCAL_INV";
    case IBV_WC_RECV: return "IBV_WC_RECV";
    case IBV_WC_RECV_RDMA_WITH_IMM: return "IBV_WC_RECV_RDMA_WITH_IMM";
    default: return "IBV_WC_<other>";
  }
}

std::string describe_completion(const ibv_wc& wc) {
  char text[256];
  std::snprintf(text, sizeof text,
                "wr_id=%llu status=%s opcode=%s(%d) byte_len=%u qp_num=0x%x wc_flags=0x%x "
                "imm_data=0x%08x vendor_err=0x%x",
                static_cast<unsigned long long>(wc.wr_id), ibv_wc_status_str(wc.status),
                wc_opcode_name(wc.opcode), static_cast<int>(wc.opcode), wc.byte_len,
                wc.qp_num, wc.wc_flags, wc.imm_data, wc.vendor_err);
  return text;
}

}  // namespace softverbs::testsupport
