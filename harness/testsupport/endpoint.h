// One side of a connected QP with everything it needs, owned in one place:
// context, PD, a send CQ and a receive CQ, the QP (RC or UC), a registered
// buffer the peer may access, and a second small region registered with
// restricted access (for remote access checks).
//
// The same Endpoint serves the test process directly and, through
// remote_endpoint.h, a forked peer the test drives by request, so both sides
// of a two-process test are written with the same calls. Every buffer and
// remote address is named by an offset, so requests stay plain data.
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "harness/testsupport/async_events.h"
#include "harness/testsupport/completion_polling.h"
#include "harness/testsupport/data_pattern.h"
#include "harness/testsupport/device.h"
#include "harness/testsupport/errors.h"
#include "harness/testsupport/rc_connection.h"
#include "harness/testsupport/registered_buffer.h"
#include "harness/testsupport/verbs_handles.h"

namespace softverbs::testsupport {

struct EndpointConfig {
  ibv_qp_type qp_type = IBV_QPT_RC;
  uint32_t max_send_wr = 64;
  uint32_t max_recv_wr = 64;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  int cq_depth = 512;
  bool sq_sig_all = false;
  uint64_t buffer_length = 1 << 20;
  // Non-zero: the main buffer's MR starts at this virtual address
  // (ibv_reg_mr_iova), which is then what peers address it by.
  uint64_t buffer_iova = 0;
  int buffer_access =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  uint64_t restricted_length = 4096;
  int restricted_access = IBV_ACCESS_LOCAL_WRITE;
  uint32_t psn = 0x100;
  uint32_t max_inline_data = 0;
  // Non-zero: the QP comes from ibv_create_qp_ex with these send ops
  // (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS), so qp_ex() has the ibv_wr_* builders.
  uint64_t send_ops_flags = 0;
  // Non-zero: both CQs come from ibv_create_cq_ex with these wc_flags.
  uint64_t cq_wc_flags = 0;
  // The QP and both CQs are made on a parent domain of the PD with a
  // thread domain, whose allocators take their memory from the heap
  // (ibv_alloc_parent_domain(3)); the MRs stay on the PD.
  bool on_parent_domain = false;
  // The receive CQ reports to a completion channel of its own
  // (recv_channel()), for tests that wait in ibv_get_cq_event.
  bool recv_cq_on_channel = false;
};
static_assert(std::is_trivially_copyable_v<EndpointConfig>);

// What a peer needs to reach an Endpoint.
struct EndpointInfo {
  QpEndpoint qp;  // QPN, PSN, address, and the main buffer (rkey, addr, length)
  uint32_t restricted_rkey = 0;
  uint64_t restricted_addr = 0;
  uint64_t restricted_length = 0;
  int32_t pid = 0;
};
static_assert(std::is_trivially_copyable_v<EndpointInfo>);

// Which remote memory a WR names.
enum class RemoteTarget : uint32_t {
  kBuffer,            // the peer's main buffer, at remote_offset
  kRestrictedRegion,  // the peer's restricted region, at remote_offset
  kUnknownRkey,       // the main buffer's address with an rkey nobody registered
  kGivenKey,          // SendSpec::rkey at address remote_offset (a memory window's)
};

// One send WR. The local data is [local_offset, local_offset + length) of
// the main buffer (atomics: the 8-byte result lands there).
struct SendSpec {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  unsigned send_flags = IBV_SEND_SIGNALED;
  uint64_t local_offset = 0;
  uint32_t length = 0;
  RemoteTarget target = RemoteTarget::kBuffer;
  uint64_t remote_offset = 0;
  uint32_t imm_data = 0;  // network byte order, as ibv_send_wr carries it
  uint32_t rkey = 0;      // RemoteTarget::kGivenKey; IBV_WR_SEND_WITH_INV: the key to invalidate
  uint64_t compare_add = 0;
  uint64_t swap = 0;
};
static_assert(std::is_trivially_copyable_v<SendSpec>);

struct RecvSpec {
  uint64_t wr_id = 0;
  uint64_t offset = 0;
  uint32_t length = 0;
};
static_assert(std::is_trivially_copyable_v<RecvSpec>);

enum class Queue : uint32_t { kSend, kRecv };

class Endpoint {
 public:
  // Opens the test device and creates everything `config` asks for.
  Errno open(const EndpointConfig& config);

  EndpointInfo info() const;

  // RESET -> INIT -> RTR (-> RTS unless `final_state` is IBV_QPS_RTR),
  // with the masks ibv_modify_qp(3) gives for the QP's type.
  Errno connect(const EndpointInfo& remote, const RcParameters& params,
                ibv_qp_state final_state = IBV_QPS_RTS);

  // ibv_post_send / ibv_post_recv of one WR; returns what the verb returned.
  Errno post_send(const SendSpec& spec);
  Errno post_recv(const RecvSpec& spec);
  // The ibv_send_wr post_send() would post (sg_list points into `sge`).
  ibv_send_wr make_send_wr(const SendSpec& spec, ibv_sge& sge) const;

  // Waits for `count` completions (ETIMEDOUT: fewer came); count 0 takes
  // whatever is there now.
  Errno poll(Queue queue, size_t count, std::vector<ibv_wc>& out,
             std::chrono::milliseconds timeout = kCompletionTimeout);

  // ibv_query_qp's state; IBV_QPS_UNKNOWN when the query fails.
  ibv_qp_state state() const;
  // ibv_modify_qp to `state` with IBV_QP_STATE only, plus
  // IBV_QP_EN_SQD_ASYNC_NOTIFY when `sqd_notify`.
  Errno move_to(ibv_qp_state state, bool sqd_notify = false);

  std::optional<AsyncEventRecord> next_async_event(std::chrono::milliseconds timeout);
  std::optional<AsyncEventRecord> wait_for_async_event(ibv_event_type type,
                                                       std::chrono::milliseconds timeout,
                                                       std::vector<AsyncEventRecord>* others);

  // Main buffer contents.
  void fill(uint64_t offset, uint64_t length, uint64_t seed);
  void fill_constant(uint64_t offset, uint64_t length, uint8_t value);
  std::optional<ByteMismatch> check(uint64_t offset, uint64_t length, uint64_t seed) const;
  std::optional<ByteMismatch> check_constant(uint64_t offset, uint64_t length,
                                             uint8_t value) const;
  uint64_t read_word(uint64_t offset) const;
  // The main buffer's memory goes back to the kernel; its MR stays.
  void unmap_buffer() { buffer_.unmap_memory(); }
  void write_word(uint64_t offset, uint64_t value);
  // Adds 1 to the word `count` times, each with an atomic instruction.
  void add_to_word(uint64_t offset, uint64_t count);

  ibv_context* context() const { return context_.get(); }
  ibv_pd* pd() const { return pd_.get(); }
  ibv_cq* send_cq() const { return send_cq_.get(); }
  ibv_cq* recv_cq() const { return recv_cq_.get(); }
  // With config.recv_cq_on_channel; nullptr otherwise.
  ibv_comp_channel* recv_channel() const { return recv_channel_.get(); }
  ibv_qp* qp() const { return qp_.get(); }
  // With config.send_ops_flags / config.cq_wc_flags; nullptr otherwise.
  ibv_qp_ex* qp_ex() const { return qp_ex_; }
  ibv_cq_ex* send_cq_ex() const { return send_cq_ex_; }
  ibv_cq_ex* recv_cq_ex() const { return recv_cq_ex_; }
  const RegisteredBuffer& buffer() const { return buffer_; }
  const PortAddress& port() const { return port_; }
  const ibv_device_attr& device_attr() const { return device_attr_; }
  const EndpointInfo& remote() const { return remote_; }

 private:
  // Declared in creation order; destroyed in reverse.
  ContextPtr context_;
  PdPtr pd_;
  TdPtr td_;
  PdPtr parent_domain_;  // with config_.on_parent_domain
  CompChannelPtr recv_channel_;  // with config_.recv_cq_on_channel
  CqPtr send_cq_;
  CqPtr recv_cq_;
  QpPtr qp_;
  RegisteredBuffer buffer_;
  RegisteredBuffer restricted_;
  EndpointConfig config_{};
  PortAddress port_{};
  ibv_device_attr device_attr_{};
  EndpointInfo remote_{};
  ibv_qp_ex* qp_ex_ = nullptr;
  ibv_cq_ex* send_cq_ex_ = nullptr;
  ibv_cq_ex* recv_cq_ex_ = nullptr;

  Errno create_parent_domain();
  Errno create_cqs(const EndpointConfig& config);
  Errno create_qp(const EndpointConfig& config);
};

// RESET -> INIT -> RTR (-> RTS) for a UC QP, whose masks differ from RC's
// (ibv_modify_qp(3)): no timeout, retries, RNR timer or RDMA-read depth.
Errno connect_uc_qp(ibv_qp* qp, const PortAddress& local, uint32_t local_psn,
                    const QpEndpoint& remote, const RcParameters& params,
                    ibv_qp_state final_state = IBV_QPS_RTS);

}  // namespace softverbs::testsupport
