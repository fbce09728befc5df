// The fixture of the transport unit tests: two endpoints of one HCA on an
// in-memory wire and a manual clock, so every packet is visible, any chosen
// one can be dropped, and timers run in no real time.
#pragma once

#include <gtest/gtest.h>

#include <cerrno>
#include <numeric>
#include <vector>

#include "emulator/engine/engine.h"
#include "emulator/fault/fault_injector.h"
#include "emulator/objects/hca.h"
#include "emulator/objects/qp_impl.h"
#include "emulator/same_host/placed_send.h"
#include "emulator/same_host/run_frame.h"
#include "emulator/transport/aeth.h"
#include "emulator/wire/loopback_wire.h"

namespace softverbs {

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
  // Set before SetUp to let frames between the fixture's QPs skip the wire
  // (local_delivery.h); off, the wire sees every frame.
  bool local_delivery_ = false;
  // Set before SetUp to count every local ACK timeout, even while the ACK
  // waits unserved in the intake (fair_timeout.h).
  bool fair_timers_ = true;

  void SetUp() override {
    auto wire = std::make_unique<LoopbackWire>();
    wire_ = wire.get();
    Engine::Config config;
    config.same_host_peers = wire_;
    config.doorbell = wire_;
    if (!fault_plan_.empty()) {
      auto injector = std::make_unique<fault::FaultInjector>(std::move(wire), clock_);
      fault::Plan plan;
      std::string error;
      ASSERT_TRUE(fault::parse_plan(fault_plan_, plan, error)) << error;
      injector->set_plan(plan);
      injector_ = injector.get();
      config.fault_injector = injector_;
      config.wire = std::move(injector);
    } else {
      config.wire = std::move(wire);
    }
    config.qpns = std::make_unique<CountingQpns>();
    config.clock = &clock_;
    config.progress_thread = false;
    config.local_delivery = local_delivery_;
    config.fair_timers = fair_timers_;
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
      sent_.push_back({run.first.bth.opcode, run.first.bth.psn, 0, false});
      return !(drop_ && drop_(sent_.size(), pkt));
    }
    // A placed SEND (placed_send.h): its packet, marked placed.
    std::span<const uint8_t> packet_bytes = frame;
    PlacedSendPrefix prefix;
    const bool placed = read_placed_send_frame(frame, packet_bytes, prefix);
    placed_seen_ += placed;
    packet::DecodedPacket pkt;
    EXPECT_EQ(placed, is_placed_send_frame(frame)) << "a placed frame's checksum fails";
    const packet::Icrc icrc = placed ? packet::Icrc::kOmitted : packet::Icrc::kComputed;
    const packet::DecodeError e = packet::decode_ib(packet_bytes, pkt, icrc);
    if (injector_ && e != packet::DecodeError::kNone) return true;  // corrupted on purpose
    EXPECT_EQ(e, packet::DecodeError::kNone);
    sent_.push_back(
        {pkt.headers.bth.opcode, pkt.headers.bth.psn, pkt.headers.aeth.syndrome, placed});
    return !(drop_ && drop_(sent_.size(), pkt));
  }

  Endpoint make_endpoint(size_t bytes, uint32_t max_sge = 4, uint32_t depth = 16) {
    Endpoint e;
    Errno err;
    e.pd = hca_->alloc_pd(err);
    e.send_cq = hca_->create_cq(64, nullptr, err, cq_stamps_);
    e.recv_cq = hca_->create_cq(64, recv_events_, err, cq_stamps_);
    Hca::QpInit init;
    init.send_cq = e.send_cq.get();
    init.recv_cq = e.recv_cq.get();
    init.cap = {depth, depth, max_sge, max_sge, 64};
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

  // Work requests of the tests: one SGE at `offset` into an endpoint's
  // buffer; a signaled SEND of it; a signaled WRITE or READ between it and
  // `offset` into the target's buffer.
  static Sge sge(Endpoint& e, uint64_t offset, uint32_t length) {
    return Sge{reinterpret_cast<uint64_t>(e.buffer.data()) + offset, length, e.mr->lkey()};
  }
  static SendRequest send_of(uint64_t wr_id, Sge& local) {
    SendRequest wr;
    wr.wr_id = wr_id;
    wr.opcode = WrOpcode::kSend;
    wr.flags = kWrSignaled;
    wr.sges = {&local, 1};
    return wr;
  }
  static SendRequest one_sided(WrOpcode opcode, uint64_t wr_id, Sge& local, Endpoint& target,
                               uint64_t offset) {
    SendRequest wr = send_of(wr_id, local);
    wr.opcode = opcode;
    wr.remote_addr = reinterpret_cast<uint64_t>(target.buffer.data()) + offset;
    wr.rkey = target.mr->rkey();
    return wr;
  }

  // Runs the engine until `cq` yields a completion or nothing moves.
  bool poll_one(Cq& cq, Completion& out, int rounds = 100000) {
    for (int i = 0; i < rounds; ++i) {
      if (cq.poll(std::span<Completion>(&out, 1)) == 1) return true;
      if (wire_->queued() == 0 && i > 2) return false;
    }
    return false;
  }
  // Posts one signaled RDMA WRITE of all of `from`'s buffer onto `to`'s.
  Errno write_whole_buffer(Endpoint& from, Endpoint& to) {
    Sge s{reinterpret_cast<uint64_t>(from.buffer.data()), static_cast<uint32_t>(from.buffer.size()),
          from.mr->lkey()};
    SendRequest wr;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.flags = kWrSignaled;
    wr.remote_addr = reinterpret_cast<uint64_t>(to.buffer.data());
    wr.rkey = to.mr->rkey();
    wr.sges = {&s, 1};
    return from.qp->post_send(wr);
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
    bool placed = false;  // a placed SEND's packet
  };
  QpType qp_type_ = QpType::kRc;
  uint32_t cq_stamps_ = 0;  // CqStamps of the CQs make_endpoint creates
  CompletionEventSink* recv_events_ = nullptr;  // of the receive CQs it creates
  ManualClock clock_;
  LoopbackWire* wire_ = nullptr;
  fault::FaultInjector* injector_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Hca> hca_;
  std::vector<Sent> sent_;
  size_t runs_seen_ = 0;
  size_t placed_seen_ = 0;  // placed SENDs among sent_
  std::function<bool(size_t index, const packet::DecodedPacket&)> drop_;
};

}  // namespace softverbs
