// The datagram endpoint of one process's connection manager: a UD QP on
// softverbs0 that sends and receives CM MADs, and the thread that serves
// it and the manager's timers. A process's CM messages all travel on it,
// whichever device a connection uses (the messages name the connection's
// own path), as QP1 carries a port's CM traffic on an HCA; the shared
// registry tells a sender which QP a listening process's agent has.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "emulator/cm/cm_types.h"
#include "emulator/cm/mad_header.h"
#include "emulator/objects/hca.h"

namespace softverbs::cm {

// The well-known Q_Key of the general services QP (IBTA 13.4.5.1).
inline constexpr uint32_t kGsiQkey = 0x80010000;

class CmAgent final : public CompletionEventSink {
 public:
  // A MAD arrived: its bytes and its sender's QPN.
  using Receiver = std::function<void(std::span<const uint8_t> mad, const AgentAddress& from)>;
  // The timers' turn: returns when to come back (steady clock ns, 0: never).
  using Ticker = std::function<uint64_t(uint64_t now_ns)>;

  static std::unique_ptr<CmAgent> start(Engine& engine, Receiver receiver, Ticker ticker,
                                        Errno& err);
  ~CmAgent() override;

  uint32_t qpn() const { return qp_->qpn(); }
  // Queues one MAD to the agent at `destination`. ENOMEM when the send
  // queue is full (the handshake's retransmission covers it); EHOSTUNREACH
  // when another host cannot be addressed from here.
  Errno send(std::span<const uint8_t, kMadBytes> mad, const AgentAddress& destination);
  // The timers changed: run the ticker now.
  void wake();

  void on_completion_event(Cq& cq) override;

  static uint64_t now_ns();

 private:
  CmAgent(Receiver receiver, Ticker ticker);
  Errno open(Engine& engine);
  void run();
  void serve_completions();
  void post_receive(uint32_t slot);
  // Who sent the MAD in `slot`, from its GRH.
  AgentAddress sender_of(const Completion& c, uint32_t slot) const;
  Ah* address_handle_for(const AgentAddress& destination, Errno& err);

  // As many MADs as the kernel's GSI QP holds (512): a burst of requests
  // beyond the posted receives is dropped, and waits for its retry.
  static constexpr uint32_t kReceiveSlots = 512;
  static constexpr uint32_t kGrhBytes = 40;
  static constexpr uint32_t kSlotBytes = kGrhBytes + kMadBytes;

  Receiver receiver_;
  Ticker ticker_;
  std::unique_ptr<Hca> hca_;
  std::unique_ptr<Pd> pd_;
  std::unique_ptr<Cq> cq_;
  std::unique_ptr<Qp> qp_;
  std::unique_ptr<Ah> ah_;  // every agent of this host
  std::mutex remote_ahs_mutex_;
  std::vector<std::pair<AgentAddress, std::unique_ptr<Ah>>> remote_ahs_;  // by host and local GID
  std::unique_ptr<Mr> mr_;
  std::vector<uint8_t> receive_buffers_;

  std::mutex mutex_;
  std::condition_variable wakeup_;
  bool signalled_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace softverbs::cm
