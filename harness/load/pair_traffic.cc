#include "harness/load/pair_traffic.h"

#include <sched.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "harness/load/processes.h"
#include "harness/load/rc_connect.h"

namespace softverbs::load {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kEndWrId = ~0ull;
constexpr uint32_t kReceiveTag = 1u << 31;  // wr_id of a receive: tag | slot

uint8_t pattern_byte(uint32_t from, uint32_t to, uint64_t k, uint32_t offset) {
  return static_cast<uint8_t>(from * 131 + to * 31 + k * 7 + offset);
}

}  // namespace

const char* outcome_name(PairOutcome outcome) {
  switch (outcome) {
    case PairOutcome::kIntact: return "intact";
    case PairOutcome::kCorrupt: return "CORRUPT";
    case PairOutcome::kCleanError: return "failed cleanly";
    case PairOutcome::kHung: return "HUNG";
  }
  return "?";
}

PairTraffic::PairTraffic(const PairConfig& config, Rendezvous& rendezvous)
    : c_(config), r_(rendezvous), deadline_(Clock::now() + config.deadline) {}

PairTraffic::~PairTraffic() { release(); }

PairOutcome PairTraffic::run() {
  if (open() && meet_peer() && exchange()) linger();
  return outcome_;
}

// Our stream is done, but the ACK of the peer's last message may have been
// lost: its retransmission must still find this QP, or the peer ends in
// RETRY_EXC_ERR against a process that has gone. So stay until the peer is
// done too, for at most two of its retransmission periods and a second.
void PairTraffic::linger() {
  r_.finished[c_.self].store(c_.generation);
  const std::chrono::nanoseconds ack_timeout(4096ull << c_.qp_timeout);  // IBTA 9.7.6.1.3
  const auto until = std::min<Clock::time_point>(
      deadline_, Clock::now() + 2 * ack_timeout + std::chrono::seconds(1));
  ibv_wc wc[16];
  while (r_.finished[c_.peer].load() != c_.generation && Clock::now() < until) {
    ibv_poll_cq(cq_, 16, wc);  // keeps this process serving its QP
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool PairTraffic::verb_failed(const char* what, int err) {
  std::fprintf(stderr, "pair side %u: %s failed: %s\n", c_.self, what, std::strerror(err));
  outcome_ = PairOutcome::kCleanError;
  return false;
}

bool PairTraffic::open() {
  context_ = open_device_named(c_.device);
  if (!context_) return verb_failed("ibv_open_device", errno ? errno : ENODEV);
  ibv_port_attr port{};
  if (int err = ibv_query_port(context_, 1, &port)) return verb_failed("ibv_query_port", err);
  mtu_ = port.active_mtu;
  Endpoint& mine = r_.endpoints[c_.self];
  mine.lid = port.lid;
  ibv_gid gid{};
  if (int err = ibv_query_gid(context_, 1, c_.gid_index, &gid))
    return verb_failed("ibv_query_gid", err);
  std::memcpy(mine.gid, gid.raw, sizeof mine.gid);
  pd_ = ibv_alloc_pd(context_);
  if (!pd_) return verb_failed("ibv_alloc_pd", errno);
  // Room for every send in flight, every receive posted, and the end.
  const int depth = static_cast<int>(2 * (c_.window + 1));
  cq_ = ibv_create_cq(context_, depth, nullptr, nullptr, 0);
  if (!cq_) return verb_failed("ibv_create_cq", errno);
  buffer_.assign(uint64_t(2) * (c_.window + 1) * c_.size, 0);
  mr_ = ibv_reg_mr(pd_, buffer_.data(), buffer_.size(), IBV_ACCESS_LOCAL_WRITE);
  if (!mr_) return verb_failed("ibv_reg_mr", errno);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap = {c_.window + 1, c_.window + 1, 1, 1, 0};
  qp_ = ibv_create_qp(pd_, &init);
  if (!qp_) return verb_failed("ibv_create_qp", errno);
  mine.qpn_toward[c_.peer] = qp_->qp_num;
  r_.published[c_.self].store(c_.generation);
  return true;
}

bool PairTraffic::meet_peer() {
  while (r_.published[c_.peer].load() != c_.generation) {
    if (Clock::now() > deadline_) return verb_failed("waiting for the peer to publish", ETIMEDOUT);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  const Endpoint& remote = r_.endpoints[c_.peer];
  const char* step = nullptr;
  if (int err = connect_rc(qp_, mtu_,
                           {remote.lid, remote.gid, remote.qpn_toward[c_.self], c_.gid_index},
                           c_.qp_timeout, step))
    return verb_failed(step, err);
  for (uint32_t slot = 0; slot <= c_.window; ++slot)
    if (!post_receive(slot)) return false;
  return true;
}

bool PairTraffic::post_receive(uint32_t slot) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(receive_slot(slot)), c_.size, mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = kReceiveTag | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int err = ibv_post_recv(qp_, &wr, &bad)) return verb_failed("ibv_post_recv", err);
  return true;
}

bool PairTraffic::post_message() {
  const uint32_t slot = static_cast<uint32_t>(sent_ % c_.window);
  uint8_t* data = send_slot(slot);
  for (uint32_t b = 0; b < c_.size; ++b) data[b] = pattern_byte(c_.self, c_.peer, sent_, b);
  ibv_sge sge{reinterpret_cast<uintptr_t>(data), c_.size, mr_->lkey};
  ibv_send_wr wr{};
  wr.wr_id = sent_;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  if (int err = ibv_post_send(qp_, &wr, &bad)) return verb_failed("ibv_post_send", err);
  ++sent_;
  return true;
}

bool PairTraffic::post_end() {
  // The count travels as immediate data; no bytes.
  ibv_send_wr wr{};
  wr.wr_id = kEndWrId;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htobe32(static_cast<uint32_t>(sent_));
  ibv_send_wr* bad = nullptr;
  if (int err = ibv_post_send(qp_, &wr, &bad)) return verb_failed("ibv_post_send (end)", err);
  end_posted_ = true;
  return true;
}

bool PairTraffic::exchange() {
  ibv_wc wc[16];
  while (!(end_done_ && peer_ended_)) {
    // Our stream is acknowledged and the peer's will never end: nothing
    // this side posts can tell it so (as on an HCA), the rendezvous can.
    if (end_done_ && r_.ended_in_error[c_.peer].load() == c_.generation) {
      std::fprintf(stderr, "pair side %u: the peer failed after %lu of its messages arrived\n",
                   c_.self, static_cast<unsigned long>(received_));
      outcome_ = PairOutcome::kCleanError;
      return false;
    }
    if (Clock::now() > deadline_) {
      std::fprintf(stderr, "pair side %u: unfinished at the deadline (sent %lu, acknowledged %lu, "
                   "received %lu, own end %s, peer's end %s)\n", c_.self,
                   static_cast<unsigned long>(sent_), static_cast<unsigned long>(send_done_),
                   static_cast<unsigned long>(received_),
                   end_done_ ? "acknowledged" : end_posted_ ? "posted" : "not posted",
                   peer_ended_ ? "arrived" : "not arrived");
      outcome_ = PairOutcome::kHung;
      return false;
    }
    auto stopping = [&] { return c_.messages ? sent_ >= c_.messages : r_.stop.load(); };
    while (!stopping() && sent_ - send_done_ < c_.window)
      if (!post_message()) return false;
    if (stopping() && !end_posted_ && send_done_ == sent_ && !post_end()) return false;
    const int n = ibv_poll_cq(cq_, 16, wc);
    if (n < 0) return verb_failed("ibv_poll_cq", EIO);
    for (int i = 0; i < n; ++i)
      if (!on_completion(wc[i])) return false;
    if (n == 0) sched_yield();
  }
  return true;
}

bool PairTraffic::on_completion(const ibv_wc& wc) {
  if (wc.status != IBV_WC_SUCCESS) {
    std::fprintf(stderr, "pair side %u: %s completion: %s\n", c_.self,
                 wc.wr_id & kReceiveTag && wc.wr_id != kEndWrId ? "receive" : "send",
                 ibv_wc_status_str(wc.status));
    outcome_ = PairOutcome::kCleanError;
    return false;
  }
  if (wc.wr_id == kEndWrId) {
    end_done_ = true;
    return true;
  }
  if (!(wc.opcode & IBV_WC_RECV)) {
    ++send_done_;
    return true;
  }
  if (wc.wc_flags & IBV_WC_WITH_IMM) {
    const uint32_t announced = be32toh(wc.imm_data);
    if (announced != static_cast<uint32_t>(received_)) {
      std::fprintf(stderr, "pair side %u: the peer sent %u messages, %lu arrived\n", c_.self,
                   announced, static_cast<unsigned long>(received_));
      outcome_ = PairOutcome::kCorrupt;
      return false;
    }
    peer_ended_ = true;
    return true;
  }
  return check_message(wc) && post_receive(static_cast<uint32_t>(wc.wr_id & ~kReceiveTag));
}

bool PairTraffic::check_message(const ibv_wc& wc) {
  const uint8_t* data = receive_slot(static_cast<uint32_t>(wc.wr_id & ~kReceiveTag));
  bool right = wc.byte_len == c_.size;
  for (uint32_t b = 0; right && b < c_.size; ++b)
    right = data[b] == pattern_byte(c_.peer, c_.self, received_, b);
  if (!right) {
    std::fprintf(stderr, "pair side %u: message %lu arrived with the wrong bytes\n", c_.self,
                 static_cast<unsigned long>(received_));
    outcome_ = PairOutcome::kCorrupt;
    return false;
  }
  ++received_;
  return true;
}

pid_t fork_side(const PairConfig& config, Rendezvous& rendezvous, bool report) {
  const pid_t child = fork();
  if (child != 0) return child;
  PairOutcome outcome;
  {
    PairTraffic traffic(config, rendezvous);
    outcome = traffic.run();
    if (outcome != PairOutcome::kIntact)
      rendezvous.ended_in_error[config.self].store(config.generation);
    if (report)
      std::printf("side %u: %s, %lu sent, %lu received\n", config.self, outcome_name(outcome),
                  static_cast<unsigned long>(traffic.sent()),
                  static_cast<unsigned long>(traffic.received()));
  }
  std::fflush(stdout);
  std::exit(static_cast<int>(outcome));  // not _exit: the library cleans up as a program's does
}

void PairTraffic::release() {
  if (qp_) ibv_destroy_qp(qp_);
  if (mr_) ibv_dereg_mr(mr_);
  if (cq_) ibv_destroy_cq(cq_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (context_) ibv_close_device(context_);
}

}  // namespace softverbs::load
