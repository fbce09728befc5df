// Frames' identities and the decisions made from them (frame_identity.h).
#include "emulator/fault/frame_identity.h"

#include <fstream>
#include <string>


namespace softverbs::fault {
namespace {

// One splitmix64 step from `hash` + `value`: the seeding Random uses.
uint64_t combine(uint64_t hash, uint64_t value) {
  uint64_t state = hash + value;
  return Random::splitmix64(state);
}

constexpr uint32_t kPsnMask = 0xffffff;

}  // namespace

uint64_t packet_key(Direction direction, const std::optional<Conversation>& qp,
                    const packet::Headers& headers) {
  const bool response = !packet::opcode_info(static_cast<uint8_t>(headers.bth.opcode)).is_request;
  const bool tx = direction == Direction::kTx;
  uint32_t psn = headers.bth.psn;
  if (qp) psn = (psn - (tx != response ? qp->sq_psn : qp->rq_psn)) & kPsnMask;
  // A datagram received carries its sender's PSN, which this QP cannot
  // place: the attempt count numbers the QP's arrivals instead.
  if (!tx && packet::opcode_info(static_cast<uint8_t>(headers.bth.opcode)).transport ==
                 packet::Transport::kUd)
    psn = 0;
  uint64_t h = combine(1, static_cast<uint64_t>(direction));
  h = combine(h, qp ? qp->ordinal : 0);
  h = combine(h, psn);
  return combine(h, static_cast<uint8_t>(headers.bth.opcode));
}

uint64_t bytes_key(Direction direction, std::span<const uint8_t> frame) {
  uint64_t h = combine(2, static_cast<uint64_t>(direction));
  for (uint8_t byte : frame) h = combine(h, byte);
  return h;
}

uint32_t AttemptCounter::next(uint64_t key) {
  uint32_t seen = 0;
  if (auto it = previous_.find(key); it != previous_.end()) seen = it->second;
  auto [it, inserted] = current_.try_emplace(key, seen);
  const uint32_t attempt = it->second;
  ++it->second;
  if (current_.size() >= kGeneration) {
    previous_ = std::move(current_);
    current_.clear();
  }
  return attempt;
}

void AttemptCounter::clear() {
  current_.clear();
  previous_.clear();
}

Random decision_random(uint64_t seed, uint64_t salt, size_t rule_index,
                       const FrameIdentity& frame) {
  uint64_t h = combine(seed, salt);
  h = combine(h, rule_index);
  h = combine(h, frame.key);
  return Random(combine(h, frame.attempt));
}

uint64_t process_salt() {
  // The program's name only: its arguments often hold what differs from run
  // to run (a free port, a temporary path, a pid).
  std::ifstream in("/proc/self/comm");
  std::string name;
  std::getline(in, name);
  uint64_t h = 3;
  for (char c : name) h = combine(h, static_cast<uint8_t>(c));
  return h;
}

}  // namespace softverbs::fault
