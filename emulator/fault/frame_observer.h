// Sees every frame that crosses the fault injector and what became of it,
// so a capture (emulator/capture/) records what really went on the wire and
// marks what a fault did to it.
#pragma once

#include <cstdint>
#include <span>

#include "emulator/fault/fault_plan.h"

namespace softverbs::fault {

enum class FrameFate : uint8_t {
  kPassed,     // sent or delivered as it was
  kDropped,    // a drop rule took it: never sent (tx) or delivered (rx)
  kDuplicate,  // the second copy a dup rule made
  kCorrupted,  // a corrupt rule flipped a bit: these are the bytes that went on
  kHeld,       // a delay or reorder rule held it back: it follows as kReleased
  kReleased,   // a held frame going on at last
};

class FrameObserver {
 public:
  // `direction` is kTx or kRx. Called from the sending or polling thread,
  // with no lock of the injector held; must not call into the wire.
  virtual void observe(Direction direction, std::span<const uint8_t> frame, FrameFate fate) = 0;

 protected:
  ~FrameObserver() = default;
};

}  // namespace softverbs::fault
