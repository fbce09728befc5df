// A scope in which frames sent by this thread may leave together: one
// pass of the requester over its send queue, one READ response. A burst
// must end before the QP lock it was begun under is released: frames held
// past it could be overtaken by later PSNs of the same QP sent by another
// thread. Ended by the destructor, so no frame stays held past the code
// that sent it.
#pragma once

#include "emulator/wire/wire.h"

namespace softverbs {

class WireBurst {
 public:
  explicit WireBurst(Wire& wire) : wire_(wire) { wire_.begin_burst(); }
  ~WireBurst() { wire_.end_burst(); }
  WireBurst(const WireBurst&) = delete;
  WireBurst& operator=(const WireBurst&) = delete;

 private:
  Wire& wire_;
};

}  // namespace softverbs
