// Who a frame is, for a fault rule's decision. Whether a rule with a
// probability fires for a frame depends only on the plan's seed, the
// process's salt, the rule, and the frame's identity within its QP's
// conversation:
//
//   direction   tx or rx
//   QP          the local QP's creation ordinal in its process (the sender
//               on tx, the receiver on rx), never its QPN, which depends on
//               which process asked the registry first
//   PSN         relative to where the QP's PSNs start (its sq_psn for
//               requests it sends and responses it receives, its rq_psn
//               for the others), so programs that pick random PSNs
//               (ibv_rc_pingpong) name the same packet alike in every run
//   opcode      the BTH opcode
//   attempt     for a request sent, how many times its QP went back N
//               before sending it; for other frames, how many of the
//               same identity this process saw before: a retransmission
//               gets a decision of its own
//
// A datagram a UD QP receives carries its sender's PSN, which the receiver
// cannot place: it is known by its QP and opcode, and its attempt is the
// number of such datagrams that QP received before it.
//
// A requester's go-backs, not a count of sends, number its attempts: after
// a sequence NAK, how many packets past the lost one it had sent before the
// NAK came depends on the host's timing, and those packets are dropped
// unseen by the responder. For the same reason such a packet, when it
// arrives, is passed without asking any rule: whatever happened to it, the
// responder drops it.
//
// never on wall time, the order in which frames of different QPs pass,
// or how many other processes share the host. A frame that names no QP of
// this process (QP1's MADs, an unreadable frame) is known by its bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>

#include "emulator/fault/fault_plan.h"
#include "emulator/fault/random.h"
#include "emulator/packet/headers.h"
#include "emulator/wire/wire.h"

namespace softverbs::fault {

// A QP of this process as fault decisions name it.
struct Conversation {
  uint32_t ordinal = 0;  // 1 for the first QP the process created
  uint32_t sq_psn = 0;   // the first PSN of the requests it sends
  uint32_t rq_psn = 0;   // the first PSN of the requests it expects
  // Of a sender: how many times its requester sent requests again so far
  // (Requester::resend_rounds).
  uint32_t resend_rounds = 0;
  // Of a receiver: the request is one its responder drops unseen (past a
  // gap it sent a sequence NAK for).
  bool discarded_unseen = false;
};

// The engine's QPs, for the injector: the QP that sends a frame to `dst`
// (WireAddress's source fields), and the QP a received packet is for.
// nullopt: none of this process.
class ConversationDirectory {
 public:
  virtual std::optional<Conversation> of_sender(const WireAddress& dst) = 0;
  virtual std::optional<Conversation> of_receiver(const packet::Headers& headers) = 0;
  // A rule acted on a decoded frame: for the QP's protocol trace.
  virtual void fault_applied(Direction /*direction*/, const WireAddress& /*dst*/,
                             const packet::Headers& /*headers*/, Action /*action*/,
                             uint32_t /*attempt*/) {}

 protected:
  ~ConversationDirectory() = default;
};

struct FrameIdentity {
  uint64_t key = 0;      // direction, QP, relative PSN, opcode (or bytes), hashed
  uint32_t attempt = 0;  // frames of the same key seen before this one
};

// The key of a decoded packet, and of a frame known only by its bytes.
uint64_t packet_key(Direction direction, const std::optional<Conversation>& qp,
                    const packet::Headers& headers);
uint64_t bytes_key(Direction direction, std::span<const uint8_t> frame);

// Counts the frames seen per key. Keys are kept for the last 32,768 to
// 65,536 distinct ones: a retransmission comes far sooner (a window is at
// most 256 packets per QP).
class AttemptCounter {
 public:
  uint32_t next(uint64_t key);  // 0 the first time
  void clear();

 private:
  static constexpr size_t kGeneration = 1u << 15;
  std::unordered_map<uint64_t, uint32_t> current_, previous_;
};

// The random numbers of one rule's decision on one frame (and of what the
// rule then does: which bit it flips, how long it holds the frame).
Random decision_random(uint64_t seed, uint64_t salt, size_t rule_index,
                       const FrameIdentity& frame);

// This process's salt: a hash of its program's name (/proc/self/comm, not
// its arguments, which often hold a free port or a temporary path), so
// that two programs of a run do not get the same faults on the same frames,
// and a program gets the same ones in every run. Two processes of one
// program do, for frames of the same identity.
uint64_t process_salt();

}  // namespace softverbs::fault
