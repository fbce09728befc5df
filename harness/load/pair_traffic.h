// One side of a pair of processes exchanging checked messages over one RC
// QP, for the load runs that attack the host around them (scribbler,
// kill_loop). Each side sends a stream of messages whose bytes name the
// pair, the direction and the message's number, keeps a window of them in
// flight, and checks every one it receives, in order. When told to stop,
// it ends its stream with a SEND_WITH_IMM carrying how many it sent; it is
// done when its own end is acknowledged and the peer's end has arrived. A
// side whose peer ended in an error (said in the rendezvous, as a program
// would learn it out of band) stops waiting for the rest of that stream.
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/load/rendezvous.h"

namespace softverbs::load {

// How a side ended; also its exit status.
enum class PairOutcome : int {
  kIntact = 0,      // every message sent was acknowledged, every one received was right
  kCorrupt = 1,     // a message completed successfully with the wrong bytes or length
  kCleanError = 3,  // a verb failed or a completion had an error status: reported, nothing wrong kept
  kHung = 4,        // the deadline passed with the stream unfinished
};

const char* outcome_name(PairOutcome outcome);

struct PairConfig {
  std::string device = "softverbs0";
  uint32_t self = 0;         // rendezvous index of this side
  uint32_t peer = 1;         // and of the other
  uint32_t generation = 1;   // what published[] holds for this run of the pair
  uint32_t size = 4096;      // bytes per message
  uint32_t window = 16;      // messages in flight each way
  uint64_t messages = 0;     // 0: until Rendezvous::stop, else this many
  uint8_t qp_timeout = 18;   // IBTA local ACK timeout exponent
  uint8_t gid_index = 0;     // the GID this side publishes and sends from
  std::chrono::seconds deadline{120};
};

class PairTraffic {
 public:
  PairTraffic(const PairConfig& config, Rendezvous& rendezvous);
  ~PairTraffic();
  PairTraffic(const PairTraffic&) = delete;
  PairTraffic& operator=(const PairTraffic&) = delete;

  PairOutcome run();
  uint64_t sent() const { return sent_; }
  uint64_t received() const { return received_; }

 private:
  bool open();
  bool meet_peer();
  bool post_receive(uint32_t slot);
  bool post_message();
  bool post_end();
  bool exchange();
  void linger();
  bool on_completion(const ibv_wc& wc);
  bool check_message(const ibv_wc& wc);
  // A verb that failed: a clean error, said with what failed.
  bool verb_failed(const char* what, int err);
  uint8_t* receive_slot(uint32_t slot) { return buffer_.data() + uint64_t(slot) * c_.size; }
  uint8_t* send_slot(uint32_t slot) {
    return buffer_.data() + uint64_t(c_.window + 1 + slot) * c_.size;
  }
  void release();

  const PairConfig c_;
  Rendezvous& r_;
  const std::chrono::steady_clock::time_point deadline_;
  PairOutcome outcome_ = PairOutcome::kIntact;
  ibv_context* context_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_cq* cq_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mtu mtu_ = IBV_MTU_1024;
  std::vector<uint8_t> buffer_;
  uint64_t sent_ = 0, send_done_ = 0, received_ = 0;
  bool end_posted_ = false, end_done_ = false, peer_ended_ = false;
};

// Forks a process that runs one side and exits with its PairOutcome; with
// `report` it prints the outcome and the message counts first.
pid_t fork_side(const PairConfig& config, Rendezvous& rendezvous, bool report);

}  // namespace softverbs::load
