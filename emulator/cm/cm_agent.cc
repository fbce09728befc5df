#include "emulator/cm/cm_agent.h"

#include <chrono>
#include <cstring>

#include "emulator/cm/cm_path.h"
#include "emulator/host/device_config.h"
#include "emulator/sync/internal_thread.h"

namespace softverbs::cm {
namespace {

// Sends a burst of connects (cmtime's hundred) may queue before the agent's
// thread reaps their completions: a refused post is a MAD lost until its
// retry, 6 s on.
constexpr uint32_t kQueueDepth = 1024;
// The agent never sleeps longer than this: a missed wakeup costs a second.
constexpr uint64_t kLongestSleepNs = 1'000'000'000;

}  // namespace

uint64_t CmAgent::now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

CmAgent::CmAgent(Receiver receiver, Ticker ticker)
    : receiver_(std::move(receiver)), ticker_(std::move(ticker)) {}

std::unique_ptr<CmAgent> CmAgent::start(Engine& engine, Receiver receiver, Ticker ticker,
                                        Errno& err) {
  std::unique_ptr<CmAgent> agent(new CmAgent(std::move(receiver), std::move(ticker)));
  if ((err = agent->open(engine))) return nullptr;
  agent->thread_ = start_internal_thread([a = agent.get()] { a->run(); });
  return agent;
}

Errno CmAgent::open(Engine& engine) {
  Errno err = 0;
  if (!(hca_ = Hca::open_on(engine, 0, err))) return err;
  if (!(pd_ = hca_->alloc_pd(err))) return err;
  if (!(cq_ = hca_->create_cq(kQueueDepth + kReceiveSlots, this, err))) return err;
  Hca::QpInit init;
  init.type = QpType::kUd;
  init.send_cq = cq_.get();
  init.recv_cq = cq_.get();
  init.cap = {kQueueDepth, kReceiveSlots, 1, 1, kMadBytes};
  init.sq_sig_all = true;
  if (!(qp_ = hca_->create_qp(*pd_, init, err))) return err;
  QpAttributes attr;
  attr.state = QpState::kInit;
  attr.pkey_index = 0;
  attr.port_num = 1;
  attr.qkey = kGsiQkey;
  if ((err = qp_->modify(attr, kQpAttrState | kQpAttrPkeyIndex | kQpAttrPort | kQpAttrQkey)))
    return err;
  attr.state = QpState::kRtr;
  if ((err = qp_->modify(attr, kQpAttrState))) return err;
  attr.state = QpState::kRts;
  attr.sq_psn = 0;
  if ((err = qp_->modify(attr, kQpAttrState | kQpAttrSqPsn))) return err;

  // Every agent is on softverbs0: one address handle reaches them all.
  const DeviceDescription& device = hca_->description();
  AddressVector av;
  av.port_num = 1;
  if (device.link_layer == LinkLayer::kEthernet) {
    av.is_global = true;
    av.dgid = device.gids.front().gid;
    av.hop_limit = 64;
  } else {
    av.dlid = device.lid;
  }
  if (!(ah_ = hca_->create_ah(*pd_, av, err))) return err;

  receive_buffers_.resize(size_t{kReceiveSlots} * kSlotBytes);
  const auto base = reinterpret_cast<uint64_t>(receive_buffers_.data());
  if (!(mr_ = hca_->register_mr(*pd_, base, receive_buffers_.size(), kAccessLocalWrite, err)))
    return err;
  for (uint32_t slot = 0; slot < kReceiveSlots; ++slot) post_receive(slot);
  return cq_->arm(false);
}

CmAgent::~CmAgent() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wakeup_.notify_one();
  if (thread_.joinable()) thread_.join();
  // Children before parents, as the HCA requires.
  qp_.reset();
  remote_ahs_.clear();
  ah_.reset();
  mr_.reset();
  cq_.reset();
  pd_.reset();
}

void CmAgent::post_receive(uint32_t slot) {
  const Sge sge{reinterpret_cast<uint64_t>(receive_buffers_.data()) + uint64_t{slot} * kSlotBytes,
                kSlotBytes, mr_->lkey()};
  RecvRequest wr;
  wr.wr_id = slot;
  wr.sges = std::span<const Sge>(&sge, 1);
  qp_->post_recv(wr);
}

// An agent on another host is reached through an address handle to its
// address, sent from ours that reaches it, made on first use.
Ah* CmAgent::address_handle_for(const AgentAddress& destination, Errno& err) {
  if (!destination.off_host) return ah_.get();
  std::lock_guard lock(remote_ahs_mutex_);
  for (auto& [key, ah] : remote_ahs_)
    if (key.host == destination.host && key.local == destination.local) return ah.get();
  const DeviceDescription& device = hca_->description();
  const uint8_t local_index = gid_index_of(device.index, destination.local);
  if (device.link_layer != LinkLayer::kEthernet || local_index == 0) {
    err = EHOSTUNREACH;  // only a RoCE softverbs0 reaches other hosts
    return nullptr;
  }
  AddressVector av;
  av.port_num = 1;
  av.is_global = true;
  av.dgid = destination.host;
  av.sgid_index = local_index;
  av.hop_limit = 64;
  std::unique_ptr<Ah> ah = hca_->create_ah(*pd_, av, err);
  if (!ah) return nullptr;
  remote_ahs_.emplace_back(AgentAddress{0, true, destination.host, destination.local},
                           std::move(ah));
  return remote_ahs_.back().second.get();
}

Errno CmAgent::send(std::span<const uint8_t, kMadBytes> mad, const AgentAddress& destination) {
  Errno err = 0;
  Ah* ah = address_handle_for(destination, err);
  if (!ah) return err;
  SendRequest wr;
  wr.opcode = WrOpcode::kSend;
  wr.flags = kWrInline | kWrSignaled;
  wr.inline_data = mad;
  wr.ah = ah;
  wr.remote_qpn = destination.qpn;
  wr.remote_qkey = kGsiQkey;
  return qp_->post_send(wr);
}

void CmAgent::wake() {
  {
    std::lock_guard lock(mutex_);
    signalled_ = true;
  }
  wakeup_.notify_one();
}

void CmAgent::on_completion_event(Cq&) { wake(); }

void CmAgent::serve_completions() {
  Completion batch[16];
  int n;
  while ((n = cq_->poll(batch)) > 0) {
    for (int i = 0; i < n; ++i) {
      const Completion& c = batch[i];
      if (c.opcode != WcOpcode::kRecv) continue;
      const auto slot = static_cast<uint32_t>(c.wr_id);
      if (c.status == WcStatus::kSuccess && c.byte_len > kGrhBytes) {
        const uint8_t* bytes = receive_buffers_.data() + size_t{slot} * kSlotBytes + kGrhBytes;
        receiver_(std::span<const uint8_t>(bytes, c.byte_len - kGrhBytes), sender_of(c, slot));
      }
      post_receive(slot);
    }
  }
}

AgentAddress CmAgent::sender_of(const Completion& c, uint32_t slot) const {
  AgentAddress from{c.src_qp};
  if (!(c.wc_flags & kWcGrh)) return from;
  // GRH bytes 8-23: the sender's GID, 24-39: the one it sent to (ours).
  const uint8_t* grh = receive_buffers_.data() + size_t{slot} * kSlotBytes;
  std::memcpy(from.host.data(), grh + 8, from.host.size());
  std::memcpy(from.local.data(), grh + 24, from.local.size());
  from.off_host = find_device_by_gid(from.host) == nullptr;
  if (!from.off_host) from.host = from.local = Gid{};
  return from;
}

void CmAgent::run() {
  while (true) {
    serve_completions();
    const uint64_t next = ticker_(now_ns());
    cq_->arm(false);
    serve_completions();  // what arrived before the arm raised no event
    std::unique_lock lock(mutex_);
    if (stopping_) return;
    const uint64_t now = now_ns();
    const uint64_t sleep_ns =
        next == 0 ? kLongestSleepNs : (next > now ? std::min(next - now, kLongestSleepNs) : 0);
    wakeup_.wait_for(lock, std::chrono::nanoseconds(sleep_ns),
                     [&] { return signalled_ || stopping_; });
    signalled_ = false;
    if (stopping_) return;
  }
}

}  // namespace softverbs::cm
