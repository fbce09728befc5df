#include "harness/testsupport/sge_layout.h"

namespace softverbs::testsupport {

std::vector<SgePiece> uneven_sge_layout(uint64_t message_length, uint32_t count,
                                        uint64_t first_offset, uint64_t gap, bool ascending) {
  std::vector<SgePiece> pieces;
  if (count == 0 || message_length == 0) return pieces;
  if (count > message_length) count = static_cast<uint32_t>(message_length);

  // Every piece gets one byte; the rest is shared out by weight 1..count.
  const uint64_t weight_sum = uint64_t{count} * (count + 1) / 2;
  const uint64_t shared = message_length - count;
  uint64_t assigned = 0;
  uint64_t buffer_offset = first_offset;
  for (uint32_t i = 0; i < count; ++i) {
    uint64_t weight = ascending ? i + 1 : count - i;
    uint64_t length = 1 + shared * weight / weight_sum;
    if (i + 1 == count) length = message_length - assigned;  // rounding leftovers
    pieces.push_back({buffer_offset, assigned, static_cast<uint32_t>(length)});
    assigned += length;
    buffer_offset += length + gap;
  }
  return pieces;
}

uint64_t layout_end(const std::vector<SgePiece>& pieces, uint64_t first_offset) {
  if (pieces.empty()) return first_offset;
  return pieces.back().buffer_offset + pieces.back().length;
}

std::vector<ibv_sge> sges_for(const std::vector<SgePiece>& pieces, uint64_t base_address,
                              uint32_t lkey) {
  std::vector<ibv_sge> sges;
  sges.reserve(pieces.size());
  for (const SgePiece& piece : pieces)
    sges.push_back({base_address + piece.buffer_offset, piece.length, lkey});
  return sges;
}

}  // namespace softverbs::testsupport
