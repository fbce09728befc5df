// AETH syndromes (IBTA 9.7.5.1, table 42).
#pragma once

#include <cstdint>

namespace softverbs::aeth {

enum class Kind : uint8_t { kAck = 0, kRnrNak = 1, kReserved = 2, kNak = 3 };

enum NakCode : uint8_t {
  kNakPsnSequenceError = 0,
  kNakInvalidRequest = 1,
  kNakRemoteAccessError = 2,
  kNakRemoteOperationalError = 3,
  kNakInvalidRdRequest = 4,
};

// Credit field value meaning "no end-to-end credit information".
constexpr uint8_t kNoCredit = 0x1f;

constexpr uint8_t ack() { return kNoCredit; }
constexpr uint8_t rnr_nak(uint8_t timer) { return 0x20 | (timer & 0x1f); }
constexpr uint8_t nak(NakCode code) { return 0x60 | code; }
constexpr Kind kind(uint8_t syndrome) { return static_cast<Kind>((syndrome >> 5) & 3); }
constexpr uint8_t value(uint8_t syndrome) { return syndrome & 0x1f; }

}  // namespace softverbs::aeth
