#include "conformance/transfer_session.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <span>

#include "harness/testsupport/completion_polling.h"
#include "harness/testsupport/data_pattern.h"
#include "harness/testsupport/device.h"
#include "harness/testsupport/rc_connection.h"
#include "harness/testsupport/registered_buffer.h"
#include "harness/testsupport/sge_layout.h"
#include "harness/testsupport/verbs_handles.h"

namespace softverbs::conformance {

using namespace softverbs::testsupport;

const char* operation_name(Operation op) {
  switch (op) {
    case Operation::kSend: return "SEND";
    case Operation::kSendWithImm: return "SEND_WITH_IMM";
    case Operation::kRdmaWrite: return "RDMA_WRITE";
    case Operation::kRdmaWriteWithImm: return "RDMA_WRITE_WITH_IMM";
    case Operation::kRdmaRead: return "RDMA_READ";
  }
  return "?";
}

namespace {

// ------------------------------------------------- shared by both sides --

// Each WR of a case owns one slot of both sides' buffers. Inside a slot the
// data starts at an odd offset and SGE pieces are separated by odd gaps;
// everything that is not data is a guard byte.
constexpr uint64_t kLead = 3;
constexpr uint64_t kGap = 61;
constexpr uint64_t kReceiveSlack = 29;  // receive buffers are larger than the message
constexpr uint64_t kTail = 64;
constexpr uint8_t kGuard = 0xa5;
constexpr uint8_t kInlineScribble = 0xee;

constexpr uint32_t kReady = 0x52454459;    // responder: receives posted, memory prepared
constexpr uint32_t kCheck = 0x43484543;    // requester: my side is complete, check yours
constexpr uint32_t kChecked = 0x4f4b4f4b;  // responder: all good

// Start PSN of the requester: close to 2^24, so longer messages cross the
// PSN wrap (PSNs are modulo 2^24).
constexpr uint32_t kRequesterPsn = 0xfffe00;
constexpr uint32_t kResponderPsn = 0x000100;

struct ResponderHello {
  uint32_t max_recv_sge = 0;
};

struct SessionSetup {
  uint32_t skip = 0;
  uint64_t buffer_length = 0;
};

struct Traits {
  ibv_wr_opcode wr_opcode;
  ibv_wc_opcode send_completion;
  bool consumes_receive;  // a receive WQE completes at the responder
  bool carries_data_to_receive;
  bool carries_imm;
  bool targets_remote_memory;
};

Traits traits_of(Operation op) {
  switch (op) {
    case Operation::kSend: return {IBV_WR_SEND, IBV_WC_SEND, true, true, false, false};
    case Operation::kSendWithImm:
      return {IBV_WR_SEND_WITH_IMM, IBV_WC_SEND, true, true, true, false};
    case Operation::kRdmaWrite:
      return {IBV_WR_RDMA_WRITE, IBV_WC_RDMA_WRITE, false, false, false, true};
    case Operation::kRdmaWriteWithImm:
      return {IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WC_RDMA_WRITE, true, false, true, true};
    case Operation::kRdmaRead:
      return {IBV_WR_RDMA_READ, IBV_WC_RDMA_READ, false, false, false, true};
  }
  return {};
}

uint64_t slot_size(const TransferCase& c) {
  uint64_t sges = std::max<uint64_t>({c.local_sges, c.recv_sges, 1});
  uint64_t size = kLead + c.length + kReceiveSlack + kGap * sges + kTail;
  return (size + 63) / 64 * 64;
}

uint64_t seed_of(const TransferCase& c, uint32_t wr) { return c.seed + wr; }
uint64_t send_wr_id(const TransferCase& c, uint32_t wr) { return (uint64_t{c.index} << 8) | wr; }
uint64_t recv_wr_id(const TransferCase& c, uint32_t wr) {
  return (uint64_t{c.index} << 8) | 0x80 | wr;
}
uint32_t imm_of(const TransferCase& c, uint32_t wr) {
  return htonl(0xc0de0000u | ((c.index & 0xfff) << 4) | wr);
}

std::vector<SgePiece> requester_pieces(const TransferCase& c) {
  return uneven_sge_layout(c.length, c.local_sges, kLead, kGap, /*ascending=*/true);
}
// The receive buffer is larger than the message by kReceiveSlack, spread
// over the SGEs the other way round from the sender's split.
std::vector<SgePiece> receive_pieces(const TransferCase& c) {
  return uneven_sge_layout(c.length + kReceiveSlack, c.recv_sges, kLead, kGap,
                           /*ascending=*/false);
}
std::vector<SgePiece> remote_region(const TransferCase& c) {
  if (c.length == 0) return {};
  return {SgePiece{kLead, 0, static_cast<uint32_t>(c.length)}};
}

// Checks one slot: bytes of `pieces` below `message_length` hold the
// pattern, every other byte is still a guard byte.
std::optional<std::string> check_slot(std::span<const uint8_t> slot,
                                      const std::vector<SgePiece>& pieces, uint64_t seed,
                                      uint64_t message_length) {
  auto guard_ok = [&](uint64_t from, uint64_t to) -> std::optional<std::string> {
    if (from >= to) return std::nullopt;
    if (auto m = find_constant_mismatch(slot.subspan(from, to - from), kGuard, from))
      return "guard " + describe_mismatch(*m) + " (slot offset) was overwritten";
    return std::nullopt;
  };
  uint64_t cursor = 0;
  for (const SgePiece& piece : pieces) {
    if (auto e = guard_ok(cursor, piece.buffer_offset)) return e;
    uint64_t data = piece.message_offset >= message_length
                        ? 0
                        : std::min<uint64_t>(piece.length, message_length - piece.message_offset);
    if (auto m = find_pattern_mismatch(slot.subspan(piece.buffer_offset, data), seed,
                                       piece.message_offset))
      return "data " + describe_mismatch(*m) + " (message offset)";
    if (auto e = guard_ok(piece.buffer_offset + data, piece.buffer_offset + piece.length))
      return e;
    cursor = piece.buffer_offset + piece.length;
  }
  return guard_ok(cursor, slot.size());
}

void fill_pieces(std::span<uint8_t> slot, const std::vector<SgePiece>& pieces, uint64_t seed) {
  for (const SgePiece& piece : pieces)
    fill_pattern(slot.subspan(piece.buffer_offset, piece.length), seed, piece.message_offset);
}

// Creates an RC QP with the widest SGE lists the device grants, starting
// from max_sge: some devices trade SGEs for WQE size.
QpPtr create_widest_qp(ibv_pd* pd, ibv_cq* cq, ibv_qp_cap cap, uint32_t max_sge, bool send_side,
                       Errno& err, ibv_qp_cap& granted) {
  for (uint32_t sges = max_sge; sges >= 1; sges = sges / 2) {
    (send_side ? cap.max_send_sge : cap.max_recv_sge) = sges;
    if (QpPtr qp = create_rc_qp(pd, cq, cq, cap, false, err, &granted)) return qp;
    if (sges == 1) break;
  }
  return nullptr;
}

// Asks for as much inline data as the device grants, from 1 KiB down.
QpPtr create_inline_qp(ibv_pd* pd, ibv_cq* cq, ibv_qp_cap cap, Errno& err, ibv_qp_cap& granted) {
  for (uint32_t size = 1024; size >= 16; size /= 2) {
    cap.max_inline_data = size;
    if (QpPtr qp = create_rc_qp(pd, cq, cq, cap, false, err, &granted)) return qp;
  }
  return nullptr;
}

RcParameters rc_parameters(const ibv_device_attr& device) {
  RcParameters params;
  // Let several READs be outstanding at once.
  params.max_rd_atomic = static_cast<uint8_t>(std::clamp(device.max_qp_init_rd_atom, 1, 4));
  params.max_dest_rd_atomic = static_cast<uint8_t>(std::clamp(device.max_qp_rd_atom, 1, 4));
  return params;
}

// ---------------------------------------------------------- requester --

class Requester {
 public:
  Requester(PeerChannel& channel, Operation op, bool inline_data)
      : channel_(channel), op_(op), traits_(traits_of(op)), inline_data_(inline_data) {}

  void run(const PlanMaker& make_plan, std::string& skip_reason);

 private:
  void open();
  void run_case(const TransferCase& c);
  void post_case(const TransferCase& c);
  void check_completion(const TransferCase& c);
  std::span<uint8_t> slot(const TransferCase& c, uint32_t wr) {
    return buffer_.bytes().subspan(wr * slot_size(c), slot_size(c));
  }
  std::span<uint8_t> inline_slot(const TransferCase& c, uint32_t wr) {
    return std::span<uint8_t>(inline_source_).subspan(wr * slot_size(c), slot_size(c));
  }

  PeerChannel& channel_;
  const Operation op_;
  const Traits traits_;
  const bool inline_data_;

  ContextPtr context_;
  ibv_device_attr device_{};
  PortAddress port_{};
  uint64_t max_msg_size_ = 0;
  PdPtr pd_;
  CqPtr cq_;
  QpPtr qp_;
  ibv_qp_cap granted_{};
  RegisteredBuffer buffer_;
  std::vector<uint8_t> inline_source_;  // never registered: inline data needs no MR
  QpEndpoint remote_{};
};

void Requester::open() {
  Errno err = 0;
  context_ = open_test_device(err);
  ASSERT_TRUE(context_) << "open device: " << describe_errno(err);
  ASSERT_EQ(0, ibv_query_device(context_.get(), &device_));
  ASSERT_EQ(0, query_test_port_address(context_.get(), port_));
  ibv_port_attr port_attr{};
  ASSERT_EQ(0, ibv_query_port(context_.get(), port_.port, &port_attr));
  max_msg_size_ = port_attr.max_msg_sz;
  pd_.reset(ibv_alloc_pd(context_.get()));
  ASSERT_TRUE(pd_);
  cq_.reset(ibv_create_cq(context_.get(), 4 * kMaxBatch, nullptr, nullptr, 0));
  ASSERT_TRUE(cq_);
  ibv_qp_cap cap{2 * kMaxBatch, 1, 1, 1, 0};
  if (inline_data_) {
    cap.max_send_sge = 2;
    qp_ = create_inline_qp(pd_.get(), cq_.get(), cap, err, granted_);
  } else {
    qp_ = create_widest_qp(pd_.get(), cq_.get(), cap, static_cast<uint32_t>(device_.max_sge),
                           /*send_side=*/true, err, granted_);
  }
  ASSERT_TRUE(qp_) << "create QP: " << describe_errno(err);
}

void Requester::run(const PlanMaker& make_plan, std::string& skip_reason) {
  ASSERT_NO_FATAL_FAILURE(open());

  ResponderHello hello;
  Errno err = channel_.receive(hello);
  ASSERT_EQ(0, err) << channel_.explain(err);

  RequesterLimits limits{device_, granted_, hello.max_recv_sge, max_msg_size_};
  std::vector<TransferCase> cases = make_plan(limits, skip_reason);
  SessionSetup setup;
  for (const TransferCase& c : cases)
    setup.buffer_length = std::max(setup.buffer_length, c.batch * slot_size(c));
  setup.skip = cases.empty() ? 1 : 0;
  ASSERT_EQ(0, err = channel_.send(setup)) << channel_.explain(err);
  if (cases.empty()) return;

  ASSERT_EQ(0, err = buffer_.allocate(pd_.get(), setup.buffer_length,
                                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                          IBV_ACCESS_REMOTE_READ))
      << "register " << setup.buffer_length << " bytes: " << describe_errno(err);
  if (inline_data_) inline_source_.resize(setup.buffer_length);

  ASSERT_EQ(0, err = channel_.receive(remote_)) << channel_.explain(err);
  QpEndpoint local = describe_endpoint(qp_.get(), kRequesterPsn, port_, buffer_.mr());
  ASSERT_EQ(0, err = channel_.send(local)) << channel_.explain(err);
  ASSERT_EQ(0, err = connect_rc_qp(qp_.get(), port_, kRequesterPsn, remote_,
                                   rc_parameters(device_)))
      << "connect: " << describe_errno(err);

  for (const TransferCase& c : cases) {
    SCOPED_TRACE("case " + std::to_string(c.index) + ": " + std::to_string(c.batch) + " x " +
                 operation_name(op_) + " of " + std::to_string(c.length) + " bytes, " +
                 std::to_string(c.local_sges) + " local SGEs, " + std::to_string(c.recv_sges) +
                 " receive SGEs" + (c.inline_data ? ", inline" : ""));
    run_case(c);
    if (::testing::Test::HasFailure()) return;
  }
  TransferCase last;
  last.last = 1;
  ASSERT_EQ(0, err = channel_.send(last)) << channel_.explain(err);
}

void Requester::run_case(const TransferCase& c) {
  Errno err = channel_.send(c);
  ASSERT_EQ(0, err) << channel_.explain(err);
  uint32_t signal = 0;
  ASSERT_EQ(0, err = channel_.receive(signal)) << channel_.explain(err);
  ASSERT_EQ(kReady, signal);

  ASSERT_NO_FATAL_FAILURE(post_case(c));
  ASSERT_NO_FATAL_FAILURE(check_completion(c));

  if (op_ == Operation::kRdmaRead) {
    for (uint32_t wr = 0; wr < c.batch; ++wr) {
      auto problem = check_slot(slot(c, wr), requester_pieces(c), seed_of(c, wr), c.length);
      EXPECT_FALSE(problem) << "READ into WR " << wr << ": " << *problem;
    }
  }

  ASSERT_EQ(0, err = channel_.send(kCheck)) << channel_.explain(err);
  ASSERT_EQ(0, err = channel_.receive(signal)) << channel_.explain(err);
  ASSERT_EQ(kChecked, signal);
}

void Requester::post_case(const TransferCase& c) {
  const std::vector<SgePiece> pieces = requester_pieces(c);
  std::vector<std::vector<ibv_sge>> sges(c.batch);
  std::vector<ibv_send_wr> wrs(c.batch);
  for (uint32_t wr = 0; wr < c.batch; ++wr) {
    if (op_ == Operation::kRdmaRead) {
      fill_constant(slot(c, wr), kGuard);
      sges[wr] = sges_for(pieces, reinterpret_cast<uintptr_t>(slot(c, wr).data()),
                          buffer_.lkey());
    } else if (c.inline_data) {
      // The L_Key of an inline WR is not checked (ibv_post_send(3)).
      fill_pieces(inline_slot(c, wr), pieces, seed_of(c, wr));
      sges[wr] = sges_for(pieces, reinterpret_cast<uintptr_t>(inline_slot(c, wr).data()), 0);
    } else {
      fill_pieces(slot(c, wr), pieces, seed_of(c, wr));
      sges[wr] = sges_for(pieces, reinterpret_cast<uintptr_t>(slot(c, wr).data()),
                          buffer_.lkey());
    }
    ibv_send_wr& w = wrs[wr];
    w.wr_id = send_wr_id(c, wr);
    w.next = wr + 1 < c.batch ? &wrs[wr + 1] : nullptr;
    w.sg_list = sges[wr].empty() ? nullptr : sges[wr].data();
    w.num_sge = static_cast<int>(sges[wr].size());
    w.opcode = traits_.wr_opcode;
    w.send_flags = (wr + 1 == c.batch ? IBV_SEND_SIGNALED : 0) |
                   (c.inline_data ? IBV_SEND_INLINE : 0);
    if (traits_.carries_imm) w.imm_data = imm_of(c, wr);
    if (traits_.targets_remote_memory) {
      w.wr.rdma.remote_addr = remote_.addr + wr * slot_size(c) + kLead;
      w.wr.rdma.rkey = remote_.rkey;
    }
  }
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qp_.get(), wrs.data(), &bad);
  ASSERT_EQ(0, rc) << "ibv_post_send: " << describe_errno(rc) << ", bad_wr index "
                   << (bad ? bad - wrs.data() : -1);
  // Inline data was copied by the post: the source may change right away.
  if (c.inline_data) {
    for (uint32_t wr = 0; wr < c.batch; ++wr) fill_constant(inline_slot(c, wr), kInlineScribble);
  }
}

void Requester::check_completion(const TransferCase& c) {
  std::vector<ibv_wc> wcs;
  Errno err = poll_completions(cq_.get(), 1, wcs);
  ASSERT_EQ(0, err) << "send completion: " << describe_errno(err);
  const ibv_wc& wc = wcs[0];
  SCOPED_TRACE(describe_completion(wc));
  ASSERT_EQ(IBV_WC_SUCCESS, wc.status) << ibv_wc_status_str(wc.status);
  // Unsignaled WRs complete silently; the one completion is the last WR's.
  EXPECT_EQ(send_wr_id(c, c.batch - 1), wc.wr_id);
  EXPECT_EQ(traits_.send_completion, wc.opcode);
  EXPECT_EQ(qp_->qp_num, wc.qp_num);
  // ibv_poll_cq(3): byte_len is relevant on the send queue for RDMA READ.
  if (op_ == Operation::kRdmaRead) {
    EXPECT_EQ(c.length, wc.byte_len);
  }
  std::vector<ibv_wc> extra;
  ASSERT_EQ(0, drain_completions(cq_.get(), extra));
  EXPECT_TRUE(extra.empty()) << "unexpected completion " << describe_completion(extra[0]);
}

// ---------------------------------------------------------- responder --

class Responder {
 public:
  Responder(PeerChannel& channel, Operation op)
      : channel_(channel), op_(op), traits_(traits_of(op)) {}

  PeerOutcome run();

 private:
  std::optional<std::string> open();
  std::optional<std::string> prepare(const TransferCase& c);
  std::optional<std::string> verify(const TransferCase& c);
  std::optional<std::string> verify_receive_completions(const TransferCase& c);
  std::span<uint8_t> slot(const TransferCase& c, uint32_t wr) {
    return buffer_.bytes().subspan(wr * slot_size(c), slot_size(c));
  }
  std::string channel_failure(Errno err) {
    return err == EPIPE ? "the requester stopped early (see its failure)" : channel_.explain(err);
  }

  PeerChannel& channel_;
  const Operation op_;
  const Traits traits_;

  ContextPtr context_;
  ibv_device_attr device_{};
  PortAddress port_{};
  PdPtr pd_;
  CqPtr cq_;
  QpPtr qp_;
  ibv_qp_cap granted_{};
  RegisteredBuffer buffer_;
};

std::optional<std::string> Responder::open() {
  Errno err = 0;
  context_ = open_test_device(err);
  if (!context_) return "open device: " + describe_errno(err);
  if (ibv_query_device(context_.get(), &device_)) return "ibv_query_device failed";
  if ((err = query_test_port_address(context_.get(), port_)))
    return "port address: " + describe_errno(err);
  pd_.reset(ibv_alloc_pd(context_.get()));
  if (!pd_) return "ibv_alloc_pd: " + describe_errno(errno);
  cq_.reset(ibv_create_cq(context_.get(), 4 * kMaxBatch, nullptr, nullptr, 0));
  if (!cq_) return "ibv_create_cq: " + describe_errno(errno);
  qp_ = create_widest_qp(pd_.get(), cq_.get(), {1, 2 * kMaxBatch, 1, 1, 0},
                         static_cast<uint32_t>(device_.max_sge), /*send_side=*/false, err,
                         granted_);
  if (!qp_) return "create QP: " + describe_errno(err);
  return std::nullopt;
}

PeerOutcome Responder::run() {
  if (auto problem = open()) return PeerOutcome::fail(*problem);
  Errno err = channel_.send(ResponderHello{granted_.max_recv_sge});
  if (err) return PeerOutcome::fail(channel_failure(err));
  SessionSetup setup;
  if ((err = channel_.receive(setup))) return PeerOutcome::fail(channel_failure(err));
  if (setup.skip) return PeerOutcome::pass();

  if ((err = buffer_.allocate(pd_.get(), setup.buffer_length,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                  IBV_ACCESS_REMOTE_READ)))
    return PeerOutcome::fail("register buffer: " + describe_errno(err));
  QpEndpoint local = describe_endpoint(qp_.get(), kResponderPsn, port_, buffer_.mr());
  if ((err = channel_.send(local))) return PeerOutcome::fail(channel_failure(err));
  QpEndpoint remote;
  if ((err = channel_.receive(remote))) return PeerOutcome::fail(channel_failure(err));
  if ((err = connect_rc_qp(qp_.get(), port_, kResponderPsn, remote, rc_parameters(device_))))
    return PeerOutcome::fail("connect: " + describe_errno(err));

  for (;;) {
    TransferCase c;
    if ((err = channel_.receive(c))) return PeerOutcome::fail(channel_failure(err));
    if (c.last) return PeerOutcome::pass();
    const std::string where = "case " + std::to_string(c.index) + " (" +
                              std::to_string(c.batch) + " x " + operation_name(op_) + " of " +
                              std::to_string(c.length) + " bytes, " +
                              std::to_string(c.recv_sges) + " receive SGEs): ";
    if (auto problem = prepare(c)) return PeerOutcome::fail(where + *problem);
    if ((err = channel_.send(kReady))) return PeerOutcome::fail(channel_failure(err));
    uint32_t signal = 0;
    if ((err = channel_.receive(signal))) return PeerOutcome::fail(channel_failure(err));
    if (signal != kCheck) return PeerOutcome::fail(where + "unexpected signal");
    if (auto problem = verify(c)) return PeerOutcome::fail(where + *problem);
    if ((err = channel_.send(kChecked))) return PeerOutcome::fail(channel_failure(err));
  }
}

std::optional<std::string> Responder::prepare(const TransferCase& c) {
  if (c.batch * slot_size(c) > buffer_.size()) return "case does not fit the buffer";
  for (uint32_t wr = 0; wr < c.batch; ++wr) {
    std::span<uint8_t> s = slot(c, wr);
    fill_constant(s, kGuard);
    if (op_ == Operation::kRdmaRead) {
      if (c.length) fill_pattern(s.subspan(kLead, c.length), seed_of(c, wr), 0);
      continue;
    }
    if (!traits_.consumes_receive) continue;
    // RDMA WRITE with immediate consumes a receive WQE but places no data
    // in it, so that WQE needs no SGE.
    std::vector<ibv_sge> sges;
    if (traits_.carries_data_to_receive)
      sges = sges_for(receive_pieces(c), reinterpret_cast<uintptr_t>(s.data()), buffer_.lkey());
    ibv_recv_wr recv{};
    recv.wr_id = recv_wr_id(c, wr);
    recv.sg_list = sges.empty() ? nullptr : sges.data();
    recv.num_sge = static_cast<int>(sges.size());
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(qp_.get(), &recv, &bad))
      return "ibv_post_recv: " + describe_errno(rc);
  }
  return std::nullopt;
}

std::optional<std::string> Responder::verify_receive_completions(const TransferCase& c) {
  std::vector<ibv_wc> wcs;
  if (Errno err = poll_completions(cq_.get(), c.batch, wcs))
    return "got " + std::to_string(wcs.size()) + " of " + std::to_string(c.batch) +
           " receive completions: " + describe_errno(err);
  const ibv_wc_opcode expected_opcode =
      op_ == Operation::kRdmaWriteWithImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
  for (uint32_t wr = 0; wr < c.batch; ++wr) {
    const ibv_wc& wc = wcs[wr];
    const std::string seen = " in receive completion " + std::to_string(wr) + ": " +
                             describe_completion(wc);
    if (wc.status != IBV_WC_SUCCESS) return "bad status" + seen;
    // RC receives complete in order (one per message, in send order).
    if (wc.wr_id != recv_wr_id(c, wr)) return "wrong wr_id" + seen;
    if (wc.opcode != expected_opcode)
      return std::string("opcode is not ") + wc_opcode_name(expected_opcode) + seen;
    // ibv_poll_cq(3): byte_len of a receive is the message length (for
    // RDMA WRITE with immediate, the length written), immediate excluded.
    if (wc.byte_len != c.length)
      return "byte_len is not " + std::to_string(c.length) + seen;
    if (wc.qp_num != qp_->qp_num) return "qp_num is not the receiving QP" + seen;
    const bool has_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
    if (has_imm != traits_.carries_imm) return "IBV_WC_WITH_IMM flag wrong" + seen;
    if (traits_.carries_imm && wc.imm_data != imm_of(c, wr))
      return "imm_data differs from the one posted" + seen;
  }
  std::vector<ibv_wc> extra;
  if (drain_completions(cq_.get(), extra) < 0) return "ibv_poll_cq failed";
  if (!extra.empty()) return "unexpected extra completion: " + describe_completion(extra[0]);
  return std::nullopt;
}

std::optional<std::string> Responder::verify(const TransferCase& c) {
  if (traits_.consumes_receive) {
    if (auto problem = verify_receive_completions(c)) return problem;
  }
  for (uint32_t wr = 0; wr < c.batch; ++wr) {
    // Data placed by SEND goes through the scatter list; by WRITE, to the
    // remote region; READ must leave the source as it was.
    const std::vector<SgePiece> pieces =
        traits_.carries_data_to_receive ? receive_pieces(c) : remote_region(c);
    if (auto problem = check_slot(slot(c, wr), pieces, seed_of(c, wr), c.length))
      return "WR " + std::to_string(wr) + ": " + *problem;
  }
  return std::nullopt;
}

}  // namespace

void run_requester(PeerChannel& channel, Operation op, bool inline_data,
                   const PlanMaker& make_plan, std::string& skip_reason) {
  Requester(channel, op, inline_data).run(make_plan, skip_reason);
}

PeerOutcome run_responder(PeerChannel& channel, Operation op) {
  return Responder(channel, op).run();
}

}  // namespace softverbs::conformance
