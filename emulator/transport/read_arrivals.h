// Which responses of the oldest outstanding RDMA READ have arrived past the
// first missing one.
//
// A lost READ response used to send the requester back for the whole rest
// of the READ, and the responder sent all of it again, queued behind the
// responses it had already sent. Keeping what arrives out of order lets the
// completer ask again for the missing responses only: one READ request per
// gap, at the PSN of the gap's first response, for the gap's bytes. A
// responder executes a duplicate READ anew from its own RETH (rxe accepts
// any part of the original), so it needs no state for that.
#pragma once

#include <bitset>
#include <cstdint>

#include "emulator/packet/headers.h"

namespace softverbs {

class ReadArrivals {
 public:
  // Responses tracked past the first missing one; later ones are dropped
  // and asked for again. 2^24 PSNs are a multiple of it, so a PSN's bit
  // does not move when PSNs wrap.
  static constexpr uint32_t kSpan = 1024;

  // Tracks the READ whose responses start at `first_psn`, forgetting what
  // was kept for another.
  void follow(uint32_t first_psn) {
    if (following_ && first_psn_ == first_psn) return;
    arrived_.reset();
    first_psn_ = first_psn;
    following_ = true;
  }
  void forget() {
    arrived_.reset();
    following_ = false;
  }

  bool arrived(uint32_t psn) const { return arrived_[psn % kSpan]; }
  void mark(uint32_t psn) { arrived_[psn % kSpan] = true; }

  // The first PSN from `cursor` on whose response has not arrived; the
  // bits it passes are cleared for the PSNs a span later.
  uint32_t first_missing(uint32_t cursor) {
    while (arrived_[cursor % kSpan]) {
      arrived_[cursor % kSpan] = false;
      cursor = packet::psn_add(cursor, 1);
    }
    return cursor;
  }

  // Calls gap(first_psn, packets) for each run of missing responses from
  // `cursor` to `last` (inclusive), in order; responses past the span count
  // as missing. Stops after `max_gaps` runs, the last of which then reaches
  // `last`.
  template <typename Gap>
  void for_each_gap(uint32_t cursor, uint32_t last, uint32_t max_gaps, Gap gap) const {
    const uint32_t total = static_cast<uint32_t>(packet::psn_diff(last, cursor)) + 1;
    uint32_t gaps = 0;
    uint32_t i = 0;
    while (i < total) {
      if (i < kSpan && arrived_[packet::psn_add(cursor, i) % kSpan]) {
        ++i;
        continue;
      }
      const uint32_t start = i;
      if (++gaps == max_gaps) {
        i = total;
      } else {
        while (i < total && (i >= kSpan || !arrived_[packet::psn_add(cursor, i) % kSpan])) ++i;
      }
      gap(packet::psn_add(cursor, start), i - start);
    }
  }

 private:
  std::bitset<kSpan> arrived_;
  uint32_t first_psn_ = 0;
  bool following_ = false;
};

}  // namespace softverbs
