// The receive WQE a responder holds for the message in progress: the head
// of the QP's own receive queue, or one taken from its SRQ (copied out,
// since the other QPs of the SRQ take from it too).
#pragma once

#include <cstdint>

#include "emulator/types.h"

namespace softverbs {

struct ReceiveWqeRef {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  uint64_t length = 0;
  const Sge* sges = nullptr;
};

}  // namespace softverbs
