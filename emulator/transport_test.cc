// The RC transport on an in-memory wire and a manual clock: every packet is
// visible, any chosen one can be dropped, and timers run in no real time.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <numeric>
#include <vector>

#include "emulator/aeth.h"
#include "emulator/engine.h"
#include "emulator/hca.h"
#include "emulator/qp_impl.h"
#include "emulator/run_frame.h"
#include "emulator/fault/fault_injector.h"
#include "emulator/wire/loopback_wire.h"

namespace softverbs {
namespace {

using packet::Opcode;

class CountingQpns final : public QpnSource {
 public:
  Errno allocate(uint32_t, uint32_t& qpn) override {
    qpn = next_++;
    return 0;
  }
  void release(uint32_t, uint32_t) override {}

 private:
  uint32_t next_ = 0x100;
};

struct Endpoint {
  std::unique_ptr<Pd> pd;
  std::unique_ptr<Cq> send_cq, recv_cq;
  std::unique_ptr<Qp> qp;
  std::vector<uint8_t> buffer;
  std::unique_ptr<Mr> mr;
};

class Transport : public ::testing::Test {
 protected:
  // Set before SetUp (in a derived fixture) to put a fault injector
  // between the engine and the loopback wire.
  std::string fault_plan_;

  void SetUp() override {
    auto wire = std::make_unique<LoopbackWire>();
    wire_ = wire.get();
    Engine::Config config;
    if (!fault_plan_.empty()) {
      auto injector = std::make_unique<fault::FaultInjector>(std::move(wire), clock_);
      fault::Plan plan;
      std::string error;
      ASSERT_TRUE(fault::parse_plan(fault_plan_, plan, error)) << error;
      injector->set_plan(plan);
      injector_ = injector.get();
      config.wire = std::move(injector);
    } else {
      config.wire = std::move(wire);
    }
    config.qpns = std::make_unique<CountingQpns>();
    config.clock = &clock_;
    config.progress_thread = false;
    engine_ = std::make_unique<Engine>(std::move(config));
    Errno err;
    hca_ = Hca::open_on(*engine_, 0, err);
    ASSERT_TRUE(hca_) << err;
    wire_->set_filter([this](std::span<const uint8_t> f) { return observe(f); });
  }

  // Records each frame's opcode and PSN; drops those `drop_` says to.
  bool observe(std::span<const uint8_t> frame) {
    if (is_run_frame(frame)) {
      RunFrame run;
      EXPECT_TRUE(decode_run(frame, run));
      ++runs_seen_;
      packet::DecodedPacket pkt;
      pkt.headers = run.first;
      sent_.push_back({run.first.bth.opcode, run.first.bth.psn, 0});
      return !(drop_ && drop_(sent_.size(), pkt));
    }
    packet::DecodedPacket pkt;
    const packet::DecodeError e = packet::decode_ib(frame, pkt);
    if (injector_ && e != packet::DecodeError::kNone) return true;  // corrupted on purpose
    EXPECT_EQ(e, packet::DecodeError::kNone);
    sent_.push_back({pkt.headers.bth.opcode, pkt.headers.bth.psn, pkt.headers.aeth.syndrome});
    return !(drop_ && drop_(sent_.size(), pkt));
  }

  Endpoint make_endpoint(size_t bytes, uint32_t max_sge = 4) {
    Endpoint e;
    Errno err;
    e.pd = hca_->alloc_pd(err);
    e.send_cq = hca_->create_cq(64, nullptr, err);
    e.recv_cq = hca_->create_cq(64, nullptr, err);
    Hca::QpInit init;
    init.send_cq = e.send_cq.get();
    init.recv_cq = e.recv_cq.get();
    init.cap = {16, 16, max_sge, max_sge, 64};
    init.type = qp_type_;
    e.qp = hca_->create_qp(*e.pd, init, err);
    EXPECT_TRUE(e.qp) << err;
    e.buffer.resize(bytes);
    e.mr = hca_->register_mr(*e.pd, reinterpret_cast<uint64_t>(e.buffer.data()), bytes,
                             kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                                 kAccessRemoteAtomic, err);
    EXPECT_TRUE(e.mr) << err;
    return e;
  }

  void connect(Endpoint& a, Endpoint& b, uint32_t a_psn, uint32_t b_psn, Mtu mtu = Mtu::k256,
               uint8_t timeout = 14, uint8_t retry = 3, uint8_t rnr_retry = 3,
               uint8_t min_rnr = 5) {
    auto bring_up = [&](Endpoint& self, Endpoint& peer, uint32_t sq_psn, uint32_t rq_psn) {
      QpAttributes attr;
      attr.state = QpState::kInit;
      attr.port_num = 1;
      attr.access_flags =
          kAccessRemoteWrite | kAccessRemoteRead | kAccessLocalWrite | kAccessRemoteAtomic;
      ASSERT_EQ(self.qp->modify(attr, kQpAttrState | kQpAttrPort | kQpAttrPkeyIndex |
                                          kQpAttrAccessFlags), 0);
      attr.state = QpState::kRtr;
      attr.av.dlid = 1;
      attr.path_mtu = mtu;
      attr.dest_qp_num = peer.qp->qpn();
      attr.rq_psn = rq_psn;
      attr.max_dest_rd_atomic = 4;
      attr.min_rnr_timer = min_rnr;
      const uint32_t rc_only = kQpAttrMaxDestRdAtomic | kQpAttrMinRnrTimer;
      ASSERT_EQ(self.qp->modify(attr, kQpAttrState | kQpAttrAv | kQpAttrPathMtu |
                                          kQpAttrDestQpn | kQpAttrRqPsn |
                                          (qp_type_ == QpType::kRc ? rc_only : 0)), 0);
      attr.state = QpState::kRts;
      attr.sq_psn = sq_psn;
      attr.timeout = timeout;
      attr.retry_cnt = retry;
      attr.rnr_retry = rnr_retry;
      attr.max_rd_atomic = 4;
      const uint32_t rc_rts = kQpAttrTimeout | kQpAttrRetryCnt | kQpAttrRnrRetry |
                              kQpAttrMaxQpRdAtomic;
      ASSERT_EQ(self.qp->modify(attr, kQpAttrState | kQpAttrSqPsn |
                                          (qp_type_ == QpType::kRc ? rc_rts : 0)), 0);
    };
    bring_up(a, b, a_psn, b_psn);
    bring_up(b, a, b_psn, a_psn);
  }

  // Runs the engine until `cq` yields a completion or nothing moves.
  bool poll_one(Cq& cq, Completion& out, int rounds = 100000) {
    for (int i = 0; i < rounds; ++i) {
      if (cq.poll(std::span<Completion>(&out, 1)) == 1) return true;
      if (wire_->queued() == 0 && i > 2) return false;
    }
    return false;
  }
  void run_until_idle() {
    for (int i = 0; i < 1000 && wire_->queued(); ++i) engine_->progress();
  }
  void advance(uint64_t ns) {
    clock_.advance(ns);
    engine_->progress();
  }

  static void fill(std::vector<uint8_t>& v, uint8_t seed) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i * 7 + seed);
  }
  size_t count_opcode(Opcode op) const {
    size_t n = 0;
    for (auto& s : sent_) n += s.opcode == op;
    return n;
  }

  struct Sent {
    Opcode opcode;
    uint32_t psn;
    uint8_t syndrome;
  };
  QpType qp_type_ = QpType::kRc;
  ManualClock clock_;
  LoopbackWire* wire_ = nullptr;
  fault::FaultInjector* injector_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Hca> hca_;
  std::vector<Sent> sent_;
  size_t runs_seen_ = 0;
  std::function<bool(size_t index, const packet::DecodedPacket&)> drop_;
};

TEST_F(Transport, MultiPacketSendScattersAcrossSges) {
  Endpoint a = make_endpoint(10000), b = make_endpoint(10000);
  connect(a, b, 100, 200);
  fill(a.buffer, 3);
  Sge rsges[3] = {{reinterpret_cast<uint64_t>(b.buffer.data()), 1000, b.mr->lkey()},
                  {reinterpret_cast<uint64_t>(b.buffer.data()) + 1000, 5, b.mr->lkey()},
                  {reinterpret_cast<uint64_t>(b.buffer.data()) + 1005, 8995, b.mr->lkey()}};
  ASSERT_EQ(b.qp->post_recv({7, rsges}), 0);
  Sge ssge{reinterpret_cast<uint64_t>(a.buffer.data()), 2500, a.mr->lkey()};
  SendRequest wr;
  wr.wr_id = 9;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&ssge, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.wr_id, 7u);
  EXPECT_EQ(c.byte_len, 2500u);
  EXPECT_EQ(c.opcode, WcOpcode::kRecv);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 2500, b.buffer.begin()));
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 9u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  // 2500 bytes at a 256-byte MTU: FIRST, 8 MIDDLE, LAST (IBTA 9.7.2).
  EXPECT_EQ(count_opcode(Opcode::kRcSendFirst), 1u);
  EXPECT_EQ(count_opcode(Opcode::kRcSendMiddle), 8u);
  EXPECT_EQ(count_opcode(Opcode::kRcSendLast), 1u);
}

TEST_F(Transport, WriteWithImmediateAndReadAcrossPsnWrap) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  // The PSNs wrap from 0xffffff to 0 in the middle of the messages.
  connect(a, b, 0xfffffd, 0xfffffe);
  fill(a.buffer, 11);
  ASSERT_EQ(b.qp->post_recv({1, {}}), 0);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 3000, a.mr->lkey()};
  SendRequest w;
  w.wr_id = 2;
  w.opcode = WrOpcode::kRdmaWriteWithImm;
  w.flags = kWrSignaled;
  w.imm_data = 0x12345678;
  w.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data()) + 100;
  w.rkey = b.mr->rkey();
  w.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(w), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(c.imm_data, 0x12345678u);
  EXPECT_EQ(c.byte_len, 3000u);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 3000, b.buffer.begin() + 100));
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);

  // Read it back into a's upper half.
  Sge r{reinterpret_cast<uint64_t>(a.buffer.data()) + 4096, 3000, a.mr->lkey()};
  SendRequest rd;
  rd.wr_id = 3;
  rd.opcode = WrOpcode::kRdmaRead;
  rd.flags = kWrSignaled;
  rd.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data()) + 100;
  rd.rkey = b.mr->rkey();
  rd.sges = {&r, 1};
  ASSERT_EQ(a.qp->post_send(rd), 0);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.opcode, WcOpcode::kRdmaRead);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 3000, a.buffer.begin() + 4096));
  EXPECT_EQ(count_opcode(Opcode::kRcReadResponseFirst), 1u);
  EXPECT_EQ(count_opcode(Opcode::kRcReadResponseLast), 1u);
}

// A message longer than the window of unacknowledged packets: the requester
// asks for ACKs inside it (AckReq) so the window keeps moving.
TEST_F(Transport, MessageLongerThanTheWindowCompletes) {
  const size_t bytes = 2 << 20;  // 8192 packets at a 256-byte MTU
  Endpoint a = make_endpoint(bytes), b = make_endpoint(bytes);
  connect(a, b, 5, 6);
  fill(a.buffer, 21);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), static_cast<uint32_t>(bytes), a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.flags = kWrSignaled;
  wr.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data());
  wr.rkey = b.mr->rkey();
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_TRUE(a.buffer == b.buffer);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteMiddle), bytes / 256 - 2);
}

// Where the wire allows, a long SEND or WRITE travels as runs: one frame per
// window of packets, the payload pulled by the receiver in one copy. The
// PSNs, the ACKs and the data are those of the packets it stands for.
TEST_F(Transport, LongMessagesTravelAsRunsAndArriveIntact) {
  wire_->allow_runs(true);
  const size_t bytes = 300 * 1024;
  Endpoint a = make_endpoint(2 * bytes), b = make_endpoint(2 * bytes);
  connect(a, b, 0xfffff0, 7, Mtu::k1024);  // PSNs wrap inside the first run
  fill(a.buffer, 13);
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), static_cast<uint32_t>(bytes), b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({1, {&r, 1}}), 0);
  // The SEND gathers from two SGEs; the WRITE lands in b's upper half.
  Sge s[2] = {{reinterpret_cast<uint64_t>(a.buffer.data()), 1000, a.mr->lkey()},
              {reinterpret_cast<uint64_t>(a.buffer.data()) + 1000,
               static_cast<uint32_t>(bytes - 1000), a.mr->lkey()}};
  SendRequest send;
  send.wr_id = 2;
  send.opcode = WrOpcode::kSendWithImm;
  send.imm_data = 0xabcd;
  send.flags = kWrSignaled;
  send.sges = {s, 2};
  ASSERT_EQ(a.qp->post_send(send), 0);
  Sge w{reinterpret_cast<uint64_t>(a.buffer.data()) + bytes, static_cast<uint32_t>(bytes),
        a.mr->lkey()};
  SendRequest write;
  write.wr_id = 3;
  write.opcode = WrOpcode::kRdmaWrite;
  write.flags = kWrSignaled;
  write.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data()) + bytes;
  write.rkey = b.mr->rkey();
  write.sges = {&w, 1};
  ASSERT_EQ(a.qp->post_send(write), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.byte_len, bytes);
  EXPECT_EQ(c.imm_data, 0xabcdu);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 2u);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 3u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_TRUE(a.buffer == b.buffer);
  const QpCounters sent = a.qp->counters(), received = b.qp->counters();
  // 300 packets per message at 1 KiB, at most 256 in flight: a few runs
  // stand for the 600 packets; only where the window had room for one
  // packet did one go as a frame of its own.
  EXPECT_GE(sent.runs_sent, 4u);
  EXPECT_EQ(received.runs_received, sent.runs_sent);
  EXPECT_EQ(runs_seen_, sent.runs_sent);
  EXPECT_EQ(sent.packets_sent, 600u);
  const size_t request_frames = sent_.size() - count_opcode(Opcode::kRcAcknowledge);
  EXPECT_LE(request_frames, sent.runs_sent + 8);
}

// A run whose payload cannot be pulled (here the sender's buffer is gone)
// places nothing and reports nothing: the responder asks for it again, and
// the requester, retrying, ends with a retry error, never a success.
TEST_F(Transport, RunThatCannotBePulledIsNeverReportedDone) {
  wire_->allow_runs(true);
  const size_t bytes = 64 * 1024;
  Endpoint a = make_endpoint(bytes), b = make_endpoint(bytes);
  connect(a, b, 0, 0, Mtu::k4096, /*timeout=*/14, /*retry=*/2);
  void* gone = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  Errno err;
  auto mr = hca_->register_mr(*a.pd, reinterpret_cast<uint64_t>(gone), bytes,
                              kAccessLocalWrite, err);
  ASSERT_TRUE(mr);
  munmap(gone, bytes);
  Sge s{reinterpret_cast<uint64_t>(gone), static_cast<uint32_t>(bytes), mr->lkey()};
  SendRequest write;
  write.opcode = WrOpcode::kRdmaWrite;
  write.flags = kWrSignaled;
  write.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data());
  write.rkey = b.mr->rkey();
  write.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(write), 0);
  Completion c;
  bool got = false;
  for (int i = 0; i < 10 && !got; ++i) {
    run_until_idle();
    got = a.send_cq->poll(std::span<Completion>(&c, 1)) == 1;
    if (!got) advance(4096ull << 14);  // the local ACK timeout
  }
  ASSERT_TRUE(got);
  EXPECT_EQ(c.status, WcStatus::kRetryExcErr);
  EXPECT_GE(b.qp->counters().run_pull_failures, 3u);
  EXPECT_EQ(b.qp->counters().sequence_naks_sent, b.qp->counters().run_pull_failures);
}

// IBTA 9.7.6.1.3: a lost packet is resent when the local ACK timer expires
// (4.096 us * 2^timeout) and the message arrives once, intact.
TEST_F(Transport, LostPacketIsRetransmittedAfterTheTimeout) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/14);
  fill(a.buffer, 5);
  ASSERT_EQ(b.qp->post_recv({1, {std::array<Sge, 1>{Sge{reinterpret_cast<uint64_t>(b.buffer.data()), 4096, b.mr->lkey()}}}}), 0);
  // 1024 bytes at MTU 256: four packets; the last one (frame 4) is lost, so
  // no later packet reveals the gap and only the timer can recover.
  drop_ = [](size_t index, const packet::DecodedPacket&) { return index == 4; };
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 1024, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  run_until_idle();
  Completion c;
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&c, 1)), 0);
  const uint64_t period = 4096ull << 14;  // 67.1 ms
  advance(period - 1000);
  EXPECT_EQ(a.send_cq->poll(std::span<Completion>(&c, 1)), 0);
  advance(2000);  // past the deadline: go back N from the lost PSN
  run_until_idle();
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.byte_len, 1024u);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 1024, b.buffer.begin()));
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&c, 1)), 0) << "delivered twice";
}

// IBTA 9.7.5.2.2: a gap in PSNs makes the responder NAK (sequence error)
// once; the requester goes back to the NAKed PSN at once, with no timeout.
TEST_F(Transport, GapIsRecoveredBySequenceNakWithoutTimeout) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/14);
  fill(a.buffer, 9);
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), 4096, b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({1, {&r, 1}}), 0);
  drop_ = [](size_t index, const packet::DecodedPacket&) { return index == 2; };
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 1024, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.byte_len, 1024u);
  EXPECT_TRUE(std::equal(a.buffer.begin(), a.buffer.begin() + 1024, b.buffer.begin()));
  size_t naks = 0;
  for (auto& f : sent_)
    naks += f.opcode == Opcode::kRcAcknowledge && aeth::kind(f.syndrome) == aeth::Kind::kNak;
  EXPECT_EQ(naks, 1u) << "one sequence NAK per gap";
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
}

// IBTA 9.7.6.1.3: after retry_cnt retries the WR completes with
// RETRY_EXC_ERR: exactly retry_cnt + 1 transmissions.
TEST_F(Transport, RetryExhaustionAfterRetryCountPlusOneSends) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/10, /*retry=*/3);
  drop_ = [](size_t, const packet::DecodedPacket& p) { return p.headers.bth.opcode == Opcode::kRcWriteOnly; };
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 8, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data());
  wr.rkey = b.mr->rkey();
  wr.sges = {&s, 1};  // unsignaled: the error completes it all the same
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  for (int i = 0; i < 10 && a.send_cq->poll(std::span<Completion>(&c, 1)) == 0; ++i)
    advance(4096ull << 10);
  EXPECT_EQ(c.status, WcStatus::kRetryExcErr);
  EXPECT_EQ(count_opcode(Opcode::kRcWriteOnly), 4u);
  EXPECT_EQ(a.qp->state(), QpState::kErr);
}

// IBTA 9.7.5.2.8: no receive WQE -> RNR NAK carrying min_rnr_timer; the
// requester waits that long before resending, rnr_retry times.
TEST_F(Transport, RnrNakBackoffAndExhaustion) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0, Mtu::k256, 14, 3, /*rnr_retry=*/2, /*min_rnr_timer=*/13);  // 0.96 ms
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 8, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  run_until_idle();
  ASSERT_EQ(count_opcode(Opcode::kRcSendOnly), 1u);
  ASSERT_EQ(sent_.back().opcode, Opcode::kRcAcknowledge);
  EXPECT_EQ(aeth::kind(sent_.back().syndrome), aeth::Kind::kRnrNak);
  EXPECT_EQ(aeth::value(sent_.back().syndrome), 13);
  advance(959'000);  // just under 960 us: nothing is resent yet
  EXPECT_EQ(count_opcode(Opcode::kRcSendOnly), 1u);
  advance(2'000);
  run_until_idle();
  EXPECT_EQ(count_opcode(Opcode::kRcSendOnly), 2u);
  advance(961'000);
  run_until_idle();
  EXPECT_EQ(count_opcode(Opcode::kRcSendOnly), 3u);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kRnrRetryExcErr);
}

TEST_F(Transport, RnrThenReceivePostedSucceeds) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0, Mtu::k256, 14, 3, 7, 1);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 8, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  run_until_idle();
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), 64, b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({5, {&r, 1}}), 0);
  advance(1'000'000);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.wr_id, 5u);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
}

TEST_F(Transport, BadRkeyIsRemoteAccessError) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 8, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data());
  wr.rkey = b.mr->rkey() ^ 0x100;
  wr.sges = {&s, 1};
  SendRequest second = wr;
  second.rkey = b.mr->rkey();
  second.wr_id = 42;
  ASSERT_EQ(a.qp->post_send(wr), 0);
  ASSERT_EQ(a.qp->post_send(second), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kRemAccessErr);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kWrFlushErr);
  EXPECT_EQ(c.wr_id, 42u);
  EXPECT_EQ(a.qp->state(), QpState::kErr);
  EXPECT_EQ(b.qp->state(), QpState::kErr);
}

TEST_F(Transport, MessageLargerThanReceiveBuffer) {
  Endpoint a = make_endpoint(1024), b = make_endpoint(1024);
  connect(a, b, 0, 0);
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), 100, b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({1, {&r, 1}}), 0);
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 500, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.status, WcStatus::kLocLenErr);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kRemInvReqErr);
}

TEST_F(Transport, LocalKeyOfAnotherPdIsLocalProtectionError) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0);
  Sge s{reinterpret_cast<uint64_t>(b.buffer.data()), 8, b.mr->lkey()};  // b's PD
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kLocProtErr);
}

// IBTA 10.3.1: entering ERR flushes every outstanding WR, in order.
TEST_F(Transport, ModifyToErrorFlushesInOrder) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0);
  for (uint64_t id = 1; id <= 3; ++id) {
    Sge r{reinterpret_cast<uint64_t>(a.buffer.data()), 64, a.mr->lkey()};
    ASSERT_EQ(a.qp->post_recv({id, {&r, 1}}), 0);
  }
  QpAttributes attr;
  attr.state = QpState::kErr;
  ASSERT_EQ(a.qp->modify(attr, kQpAttrState), 0);
  for (uint64_t id = 1; id <= 3; ++id) {
    Completion c;
    ASSERT_EQ(a.recv_cq->poll(std::span<Completion>(&c, 1)), 1);
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(c.status, WcStatus::kWrFlushErr);
  }
}

// IBTA 9.4.5: compare-and-swap and fetch-and-add return the original value
// into the requester's 8-byte buffer.
TEST_F(Transport, AtomicsReturnTheOriginalValue) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0);
  auto* target = reinterpret_cast<uint64_t*>(b.buffer.data() + 8);
  *target = 100;
  auto* result = reinterpret_cast<uint64_t*>(a.buffer.data());
  Sge s{reinterpret_cast<uint64_t>(result), 8, a.mr->lkey()};
  SendRequest faa;
  faa.opcode = WrOpcode::kAtomicFetchAdd;
  faa.flags = kWrSignaled;
  faa.remote_addr = reinterpret_cast<uint64_t>(target);
  faa.rkey = b.mr->rkey();
  faa.compare_add = 5;
  faa.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(faa), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(c.opcode, WcOpcode::kFetchAdd);
  EXPECT_EQ(*result, 100u);
  EXPECT_EQ(*target, 105u);
  SendRequest cas = faa;
  cas.opcode = WrOpcode::kAtomicCmpSwp;
  cas.compare_add = 105;
  cas.swap = 7;
  ASSERT_EQ(a.qp->post_send(cas), 0);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.opcode, WcOpcode::kCompSwap);
  EXPECT_EQ(*result, 105u);
  EXPECT_EQ(*target, 7u);
  cas.compare_add = 1;  // mismatch: memory unchanged, original returned
  cas.swap = 99;
  ASSERT_EQ(a.qp->post_send(cas), 0);
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(*result, 7u);
  EXPECT_EQ(*target, 7u);
}

// IBTA 9.7.5.3.2: a duplicate atomic is answered from the saved result and
// never executed twice.
TEST_F(Transport, LostAtomicAckIsReplayedNotReexecuted) {
  Endpoint a = make_endpoint(64), b = make_endpoint(64);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/12);
  auto* target = reinterpret_cast<uint64_t*>(b.buffer.data());
  *target = 40;
  auto* result = reinterpret_cast<uint64_t*>(a.buffer.data() + 8);
  drop_ = [](size_t, const packet::DecodedPacket& p) {
    static int acks = 0;
    return p.headers.bth.opcode == Opcode::kRcAtomicAcknowledge && ++acks == 1;
  };
  Sge s{reinterpret_cast<uint64_t>(result), 8, a.mr->lkey()};
  SendRequest faa;
  faa.opcode = WrOpcode::kAtomicFetchAdd;
  faa.flags = kWrSignaled;
  faa.remote_addr = reinterpret_cast<uint64_t>(target);
  faa.rkey = b.mr->rkey();
  faa.compare_add = 2;
  faa.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(faa), 0);
  run_until_idle();
  advance((4096ull << 12) + 1000);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(*result, 40u);
  EXPECT_EQ(*target, 42u) << "executed twice";
  EXPECT_EQ(count_opcode(Opcode::kRcFetchAdd), 2u);
  EXPECT_EQ(b.qp->counters().atomic_replays, 1u);
  EXPECT_EQ(a.qp->counters().retransmit_timeouts, 1u);
  EXPECT_EQ(a.qp->counters().retransmitted_packets, 1u);
}

// IBTA 9.8.3: UC loses a message with a lost packet silently, and the
// receive WQE serves the next message.
TEST_F(Transport, UcLostPacketDropsOnlyThatMessage) {
  qp_type_ = QpType::kUc;
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0);
  fill(a.buffer, 1);
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), 4096, b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({77, {&r, 1}}), 0);
  drop_ = [](size_t index, const packet::DecodedPacket&) { return index == 2; };
  Sge s{reinterpret_cast<uint64_t>(a.buffer.data()), 1024, a.mr->lkey()};
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrSignaled;
  wr.sges = {&s, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);  // 4 packets; the 2nd is lost
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c));  // UC completes on sending
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  run_until_idle();
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&c, 1)), 0);
  Sge small{reinterpret_cast<uint64_t>(a.buffer.data()) + 7, 300, a.mr->lkey()};
  wr.sges = {&small, 1};
  ASSERT_EQ(a.qp->post_send(wr), 0);
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(c.wr_id, 77u);
  EXPECT_EQ(c.byte_len, 300u);
  EXPECT_TRUE(std::equal(a.buffer.begin() + 7, a.buffer.begin() + 307, b.buffer.begin()));
  EXPECT_EQ(b.qp->counters().uc_messages_dropped, 1u);
  EXPECT_EQ(count_opcode(Opcode::kRcAcknowledge), 0u) << "UC is never acknowledged";
}

// Ping-pong under random loss: every message arrives exactly once, in order,
// intact, and nothing but timeouts and NAKs is needed to recover.
TEST_F(Transport, PingPongSurvivesRandomLoss) {
  Endpoint a = make_endpoint(8192), b = make_endpoint(8192);
  connect(a, b, 1000, 2000, Mtu::k1024, /*timeout=*/10, /*retry=*/7);
  uint64_t state = 12345;
  drop_ = [&state](size_t, const packet::DecodedPacket&) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % 100 < 3;  // 3% loss
  };
  Endpoint* side[2] = {&a, &b};
  for (int round = 0; round < 300; ++round) {
    Endpoint& from = *side[round % 2];
    Endpoint& to = *side[1 - round % 2];
    const uint32_t len = 1 + (round * 997) % 4000;
    for (uint32_t i = 0; i < len; ++i) from.buffer[i] = static_cast<uint8_t>(round + i);
    Sge r{reinterpret_cast<uint64_t>(to.buffer.data()) + 4096, 4096, to.mr->lkey()};
    ASSERT_EQ(to.qp->post_recv({static_cast<uint64_t>(round), {&r, 1}}), 0);
    Sge s{reinterpret_cast<uint64_t>(from.buffer.data()), len, from.mr->lkey()};
    SendRequest wr;
    wr.wr_id = round;
    wr.opcode = WrOpcode::kSend;
    wr.flags = kWrSignaled;
    wr.sges = {&s, 1};
    ASSERT_EQ(from.qp->post_send(wr), 0);
    Completion rc{}, sc{};
    bool got_recv = false, got_send = false;
    for (int step = 0; step < 200 && !(got_recv && got_send); ++step) {
      if (!got_recv) got_recv = to.recv_cq->poll(std::span<Completion>(&rc, 1)) == 1;
      if (!got_send) got_send = from.send_cq->poll(std::span<Completion>(&sc, 1)) == 1;
      if (!(got_recv && got_send) && wire_->queued() == 0) advance(4096ull << 10);
    }
    ASSERT_TRUE(got_recv && got_send) << "round " << round;
    ASSERT_EQ(rc.status, WcStatus::kSuccess);
    ASSERT_EQ(rc.wr_id, static_cast<uint64_t>(round));
    ASSERT_EQ(rc.byte_len, len);
    ASSERT_EQ(sc.status, WcStatus::kSuccess);
    ASSERT_TRUE(std::equal(from.buffer.begin(), from.buffer.begin() + len,
                           to.buffer.begin() + 4096));
  }
  Completion extra;
  EXPECT_EQ(a.recv_cq->poll(std::span<Completion>(&extra, 1)), 0);
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&extra, 1)), 0);
  const QpCounters ca = a.qp->counters(), cb = b.qp->counters();
  EXPECT_GT(ca.retransmitted_packets + cb.retransmitted_packets, 0u);
  // Both recovery paths ran: the timer (a lost last packet or ACK) and the
  // sequence NAK (a lost packet inside a message).
  EXPECT_GT(ca.retransmit_timeouts + cb.retransmit_timeouts, 0u);
  EXPECT_GT(ca.sequence_naks_received + cb.sequence_naks_received, 0u);
  EXPECT_GT(ca.duplicate_requests + cb.duplicate_requests, 0u);
}

// IBTA 9.7.5.1.x: an ACK for a request behind a READ whose response was lost
// tells the requester the response is gone (an implied NAK): it asks again.
TEST_F(Transport, LostReadResponseIsRecoveredByTheAckBehindIt) {
  Endpoint a = make_endpoint(4096), b = make_endpoint(4096);
  connect(a, b, 0, 0, Mtu::k256, /*timeout=*/14);
  fill(b.buffer, 4);
  Sge r{reinterpret_cast<uint64_t>(b.buffer.data()) + 2048, 64, b.mr->lkey()};
  ASSERT_EQ(b.qp->post_recv({1, {&r, 1}}), 0);
  drop_ = [](size_t, const packet::DecodedPacket& p) {
    static int responses = 0;
    return p.headers.bth.opcode == Opcode::kRcReadResponseOnly && ++responses == 1;
  };
  Sge rs{reinterpret_cast<uint64_t>(a.buffer.data()), 100, a.mr->lkey()};
  SendRequest rd;
  rd.wr_id = 1;
  rd.opcode = WrOpcode::kRdmaRead;
  rd.flags = kWrSignaled;
  rd.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data());
  rd.rkey = b.mr->rkey();
  rd.sges = {&rs, 1};
  ASSERT_EQ(a.qp->post_send(rd), 0);
  Sge ss{reinterpret_cast<uint64_t>(a.buffer.data()) + 1024, 8, a.mr->lkey()};
  SendRequest send;
  send.wr_id = 2;
  send.opcode = WrOpcode::kSend;
  send.flags = kWrSignaled;
  send.sges = {&ss, 1};
  ASSERT_EQ(a.qp->post_send(send), 0);
  Completion c;
  ASSERT_TRUE(poll_one(*a.send_cq, c)) << "no timeout needed";
  EXPECT_EQ(c.wr_id, 1u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_TRUE(std::equal(b.buffer.begin(), b.buffer.begin() + 100, a.buffer.begin()));
  ASSERT_TRUE(poll_one(*a.send_cq, c));
  EXPECT_EQ(c.wr_id, 2u);
  EXPECT_EQ(c.status, WcStatus::kSuccess);
  EXPECT_EQ(a.qp->counters().implied_naks, 1u);
  EXPECT_EQ(a.qp->counters().retransmit_timeouts, 0u);
  ASSERT_TRUE(poll_one(*b.recv_cq, c));
  EXPECT_EQ(b.recv_cq->poll(std::span<Completion>(&c, 1)), 0) << "SEND delivered twice";
}

TEST_F(Transport, IllegalTransitionChangesNothing) {
  Endpoint a = make_endpoint(64);
  QpAttributes attr;
  attr.state = QpState::kRtr;
  EXPECT_EQ(a.qp->modify(attr, kQpAttrState), EINVAL);
  EXPECT_EQ(a.qp->state(), QpState::kReset);
  attr.state = QpState::kInit;
  attr.port_num = 2;  // no such port
  EXPECT_EQ(a.qp->modify(attr, kQpAttrState | kQpAttrPort | kQpAttrPkeyIndex | kQpAttrAccessFlags),
            EINVAL);
  EXPECT_EQ(a.qp->state(), QpState::kReset);
}

}  // namespace
}  // namespace softverbs

namespace softverbs {
namespace {

// Mixed RC traffic under every fault at once, on the manual clock: the run
// replays bit for bit, and a stall (outstanding packets with no timer to
// recover them) shows as a test failure, not a hang.
class TransportUnderFaults : public Transport, public ::testing::WithParamInterface<int> {
 protected:
  void SetUp() override {
    fault_plan_ = "seed=" + std::to_string(GetParam()) +
                  "; drop:p=0.05; dup:p=0.01; reorder:p=0.05,depth=3; corrupt:p=0.001";
    Transport::SetUp();
  }
};

// Seed 8 once found responses that acknowledged a SEND without moving the
// unacknowledged PSN, leaving no timer to recover a lost READ response.
INSTANTIATE_TEST_SUITE_P(Seeds, TransportUnderFaults, ::testing::Values(1, 5, 8));

TEST_P(TransportUnderFaults, MixedTrafficCompletesInOrderExactlyOnce) {
  const size_t bytes = 1 << 20;
  Endpoint a = make_endpoint(bytes), b = make_endpoint(bytes);
  connect(a, b, 0xffff00, 0x000100, Mtu::k1024, /*timeout=*/10, /*retry=*/7);
  uint64_t rng = 99;
  auto next = [&rng](uint64_t n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (rng >> 33) % n;
  };
  uint64_t wr_id = 0;
  for (int round = 0; round < 200; ++round) {
    const int batch = 1 + static_cast<int>(next(8));
    std::vector<uint64_t> expected;
    for (int i = 0; i < batch; ++i) {
      const uint32_t len = 1 + static_cast<uint32_t>(next(64 * 1024));
      const uint64_t off = next(bytes - len);
      Sge s{reinterpret_cast<uint64_t>(a.buffer.data()) + off, len, a.mr->lkey()};
      SendRequest wr;
      wr.wr_id = ++wr_id;
      wr.flags = kWrSignaled;
      wr.sges = {&s, 1};
      wr.rkey = b.mr->rkey();
      wr.remote_addr = reinterpret_cast<uint64_t>(b.buffer.data()) + next(bytes - len);
      switch (next(4)) {
        case 0: wr.opcode = WrOpcode::kRdmaWrite; break;
        case 1: wr.opcode = WrOpcode::kRdmaRead; break;
        case 2: {
          wr.opcode = WrOpcode::kAtomicFetchAdd;
          s.length = 8;
          s.addr &= ~7ull;
          wr.remote_addr &= ~7ull;
          wr.compare_add = 1;
          break;
        }
        default: {
          wr.opcode = WrOpcode::kSend;
          Sge r{reinterpret_cast<uint64_t>(b.buffer.data()), static_cast<uint32_t>(bytes),
                b.mr->lkey()};
          ASSERT_EQ(b.qp->post_recv({wr_id, {&r, 1}}), 0);
        }
      }
      ASSERT_EQ(a.qp->post_send(wr), 0);
      expected.push_back(wr_id);
    }
    for (uint64_t id : expected) {
      Completion c{};
      bool got = false;
      for (int step = 0; step < 20000 && !got; ++step) {
        got = a.send_cq->poll(std::span<Completion>(&c, 1)) == 1;
        if (!got && wire_->queued() == 0 && !injector_->has_deferred()) {
          // Nothing on the wire: only a timer can move things now.
          QpImpl& qp = a.qp->impl();
          const uint32_t una = qp.completer.unacked_psn(), next = qp.requester.next_psn();
          ASSERT_TRUE(una == next || qp.completer.timer_armed())
              << "round " << round << ": packets outstanding (una " << una << ", next " << next
              << ") and no timer to recover them";
          advance(4096ull << 10);
        } else if (!got) {
          advance(20'000);  // lets delayed and reordered frames go
        }
      }
      ASSERT_TRUE(got) << "round " << round << ": WR " << id << " never completed";
      ASSERT_EQ(c.status, WcStatus::kSuccess) << "round " << round << " WR " << id;
      ASSERT_EQ(c.wr_id, id) << "completions out of order";
    }
  }
}

}  // namespace
}  // namespace softverbs
