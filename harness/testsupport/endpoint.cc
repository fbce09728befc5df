#include "harness/testsupport/endpoint.h"

#include <cstdlib>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace softverbs::testsupport {
namespace {

// An rkey no MR of the peer carries: the real one with its key byte and
// index bits changed (IBTA 10.6.3.1: the consumer-owned key byte).
uint32_t unregistered_rkey(uint32_t rkey) { return rkey ^ 0x00a5a5a5u; }

}  // namespace

Errno connect_uc_qp(ibv_qp* qp, const PortAddress& local, uint32_t local_psn,
                    const QpEndpoint& remote, const RcParameters& params,
                    ibv_qp_state final_state) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = local.port;
  // UC has no RDMA READ or atomics (IBTA 9.8.3); asking for them is an error.
  attr.qp_access_flags = params.access & (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (int rc = ibv_modify_qp(qp, &attr,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                 IBV_QP_ACCESS_FLAGS))
    return rc;
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.ah_attr = address_vector_to(local, remote);
  attr.path_mtu = std::min(params.path_mtu, local.active_mtu);
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  if (int rc = ibv_modify_qp(qp, &attr,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN))
    return rc;
  if (final_state == IBV_QPS_RTR) return 0;
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = local_psn & 0xffffff;
  return ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

Errno Endpoint::open(const EndpointConfig& config) {
  config_ = config;
  Errno err = 0;
  context_ = open_test_device(err);
  if (!context_) return err ? err : ENODEV;
  if (int rc = ibv_query_device(context_.get(), &device_attr_)) return rc;
  if (Errno e = query_test_port_address(context_.get(), port_)) return e;
  if (Errno e = make_async_fd_nonblocking(context_.get())) return e;
  errno = 0;
  pd_.reset(ibv_alloc_pd(context_.get()));
  if (!pd_) return errno ? errno : ENOMEM;
  if (config.on_parent_domain) {
    if (Errno e = create_parent_domain()) return e;
  }
  if (Errno e = create_cqs(config)) return e;
  if (Errno e = create_qp(config)) return e;
  if (Errno e = buffer_.allocate(pd_.get(), config.buffer_length, config.buffer_access,
                                 config.buffer_iova))
    return e;
  return restricted_.allocate(pd_.get(), config.restricted_length, config.restricted_access);
}

namespace {

void* heap_alloc(ibv_pd*, void*, size_t size, size_t alignment, uint64_t) {
  return std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
}
void heap_free(ibv_pd*, void*, void* ptr, uint64_t) { std::free(ptr); }

}  // namespace

Errno Endpoint::create_parent_domain() {
  errno = 0;
  ibv_td_init_attr td_attr{};
  td_.reset(ibv_alloc_td(context_.get(), &td_attr));
  if (!td_) return errno ? errno : ENOMEM;
  ibv_parent_domain_init_attr attr{};
  attr.pd = pd_.get();
  attr.td = td_.get();
  attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
  attr.alloc = heap_alloc;
  attr.free = heap_free;
  parent_domain_.reset(ibv_alloc_parent_domain(context_.get(), &attr));
  return parent_domain_ ? 0 : (errno ? errno : ENOMEM);
}

Errno Endpoint::create_cqs(const EndpointConfig& config) {
  errno = 0;
  if (config.recv_cq_on_channel) {
    recv_channel_.reset(ibv_create_comp_channel(context_.get()));
    if (!recv_channel_) return errno ? errno : ENOMEM;
  }
  if (config.cq_wc_flags == 0 && !parent_domain_) {
    send_cq_.reset(ibv_create_cq(context_.get(), config.cq_depth, nullptr, nullptr, 0));
    if (!send_cq_) return errno ? errno : ENOMEM;
    recv_cq_.reset(
        ibv_create_cq(context_.get(), config.cq_depth, nullptr, recv_channel_.get(), 0));
    return recv_cq_ ? 0 : (errno ? errno : ENOMEM);
  }
  ibv_cq_init_attr_ex attr{};
  attr.cqe = config.cq_depth;
  attr.wc_flags = config.cq_wc_flags;
  if (parent_domain_) {
    attr.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    attr.parent_domain = parent_domain_.get();
  }
  send_cq_ex_ = ibv_create_cq_ex(context_.get(), &attr);
  if (!send_cq_ex_) return errno ? errno : ENOMEM;
  send_cq_.reset(ibv_cq_ex_to_cq(send_cq_ex_));
  attr.channel = recv_channel_.get();
  recv_cq_ex_ = ibv_create_cq_ex(context_.get(), &attr);
  if (!recv_cq_ex_) return errno ? errno : ENOMEM;
  recv_cq_.reset(ibv_cq_ex_to_cq(recv_cq_ex_));
  return 0;
}

Errno Endpoint::create_qp(const EndpointConfig& config) {
  ibv_qp_init_attr_ex init{};
  init.send_cq = send_cq_.get();
  init.recv_cq = recv_cq_.get();
  init.cap = {config.max_send_wr, config.max_recv_wr, config.max_send_sge, config.max_recv_sge,
              config.max_inline_data};
  init.qp_type = config.qp_type;
  init.sq_sig_all = config.sq_sig_all ? 1 : 0;
  init.comp_mask = IBV_QP_INIT_ATTR_PD;
  init.pd = parent_domain_ ? parent_domain_.get() : pd_.get();
  if (config.send_ops_flags) {
    init.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    init.send_ops_flags = config.send_ops_flags;
  }
  errno = 0;
  // With IBV_QP_INIT_ATTR_PD alone this is ibv_create_qp (verbs.h).
  qp_.reset(ibv_create_qp_ex(context_.get(), &init));
  if (!qp_) return errno ? errno : EINVAL;
  if (config.send_ops_flags) {
    qp_ex_ = ibv_qp_to_qp_ex(qp_.get());
    if (!qp_ex_) return EOPNOTSUPP;
  }
  return 0;
}

EndpointInfo Endpoint::info() const {
  EndpointInfo info;
  info.qp = describe_endpoint(qp_.get(), config_.psn, port_, buffer_.mr());
  info.qp.addr = buffer_.mr_address();
  info.restricted_rkey = restricted_.rkey();
  info.restricted_addr = restricted_.address();
  info.restricted_length = restricted_.size();
  info.pid = static_cast<int32_t>(getpid());
  return info;
}

Errno Endpoint::connect(const EndpointInfo& remote, const RcParameters& params,
                        ibv_qp_state final_state) {
  remote_ = remote;
  if (config_.qp_type == IBV_QPT_UC)
    return connect_uc_qp(qp_.get(), port_, config_.psn, remote.qp, params, final_state);
  if (Errno e = modify_rc_to_init(qp_.get(), port_, params)) return e;
  if (Errno e = modify_rc_to_rtr(qp_.get(), port_, remote.qp, params)) return e;
  if (final_state == IBV_QPS_RTR) return 0;
  if (Errno e = modify_rc_to_rts(qp_.get(), config_.psn, params)) return e;
  return params.alternate_path ? load_alternate_path(qp_.get(), port_, remote.qp, params) : 0;
}

ibv_send_wr Endpoint::make_send_wr(const SendSpec& spec, ibv_sge& sge) const {
  ibv_send_wr wr{};
  wr.wr_id = spec.wr_id;
  wr.opcode = spec.opcode;
  wr.send_flags = spec.send_flags;
  const bool atomic = spec.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
                      spec.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;
  sge = {buffer_.mr_address() + spec.local_offset, atomic ? 8u : spec.length, buffer_.lkey()};
  if (sge.length > 0) {
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  uint64_t remote_addr = remote_.qp.addr + spec.remote_offset;
  uint32_t rkey = remote_.qp.rkey;
  switch (spec.target) {
    case RemoteTarget::kBuffer: break;
    case RemoteTarget::kRestrictedRegion:
      remote_addr = remote_.restricted_addr + spec.remote_offset;
      rkey = remote_.restricted_rkey;
      break;
    case RemoteTarget::kUnknownRkey: rkey = unregistered_rkey(rkey); break;
    case RemoteTarget::kGivenKey:
      remote_addr = spec.remote_offset;
      rkey = spec.rkey;
      break;
  }
  if (atomic) {
    wr.wr.atomic.remote_addr = remote_addr;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = spec.compare_add;
    wr.wr.atomic.swap = spec.swap;
  } else {
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
  }
  if (spec.opcode == IBV_WR_SEND_WITH_IMM || spec.opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
    wr.imm_data = spec.imm_data;
  if (spec.opcode == IBV_WR_SEND_WITH_INV) wr.invalidate_rkey = spec.rkey;
  return wr;
}

Errno Endpoint::post_send(const SendSpec& spec) {
  ibv_sge sge{};
  ibv_send_wr wr = make_send_wr(spec, sge);
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(qp_.get(), &wr, &bad);
}

Errno Endpoint::post_recv(const RecvSpec& spec) {
  ibv_sge sge{buffer_.mr_address() + spec.offset, spec.length, buffer_.lkey()};
  ibv_recv_wr wr{};
  wr.wr_id = spec.wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(qp_.get(), &wr, &bad);
}

Errno Endpoint::poll(Queue queue, size_t count, std::vector<ibv_wc>& out,
                     std::chrono::milliseconds timeout) {
  ibv_cq* cq = queue == Queue::kSend ? send_cq_.get() : recv_cq_.get();
  if (count == 0) return drain_completions(cq, out) < 0 ? EIO : 0;
  return poll_completions(cq, count, out, timeout);
}

ibv_qp_state Endpoint::state() const { return query_qp_state(qp_.get()); }

Errno Endpoint::move_to(ibv_qp_state state, bool sqd_notify) {
  ibv_qp_attr attr{};
  attr.qp_state = state;
  int mask = IBV_QP_STATE;
  if (sqd_notify) {
    attr.en_sqd_async_notify = 1;
    mask |= IBV_QP_EN_SQD_ASYNC_NOTIFY;
  }
  return ibv_modify_qp(qp_.get(), &attr, mask);
}

std::optional<AsyncEventRecord> Endpoint::next_async_event(std::chrono::milliseconds timeout) {
  return testsupport::next_async_event(context_.get(), timeout);
}

std::optional<AsyncEventRecord> Endpoint::wait_for_async_event(
    ibv_event_type type, std::chrono::milliseconds timeout,
    std::vector<AsyncEventRecord>* others) {
  return testsupport::wait_for_async_event(context_.get(), type, qp_->qp_num, timeout, others);
}

void Endpoint::fill(uint64_t offset, uint64_t length, uint64_t seed) {
  fill_pattern(buffer_.bytes().subspan(offset, length), seed, 0);
}

void Endpoint::fill_constant(uint64_t offset, uint64_t length, uint8_t value) {
  testsupport::fill_constant(buffer_.bytes().subspan(offset, length), value);
}

std::optional<ByteMismatch> Endpoint::check(uint64_t offset, uint64_t length,
                                            uint64_t seed) const {
  return find_pattern_mismatch(buffer_.bytes().subspan(offset, length), seed, 0);
}

std::optional<ByteMismatch> Endpoint::check_constant(uint64_t offset, uint64_t length,
                                                     uint8_t value) const {
  return find_constant_mismatch(buffer_.bytes().subspan(offset, length), value, 0);
}

uint64_t Endpoint::read_word(uint64_t offset) const {
  // The peer's atomics write this word: read it as one atomic load.
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(buffer_.data() + offset),
                         __ATOMIC_SEQ_CST);
}

void Endpoint::write_word(uint64_t offset, uint64_t value) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(buffer_.data() + offset), value,
                   __ATOMIC_SEQ_CST);
}

void Endpoint::add_to_word(uint64_t offset, uint64_t count) {
  auto* word = reinterpret_cast<uint64_t*>(buffer_.data() + offset);
  for (uint64_t i = 0; i < count; ++i) __atomic_fetch_add(word, 1, __ATOMIC_SEQ_CST);
}

}  // namespace softverbs::testsupport
