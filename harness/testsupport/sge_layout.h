// Scatter/gather layouts for data tests: a message split unevenly over
// several SGEs, placed with gaps in a local buffer, so a transfer that gathers
// or scatters at the wrong place, or writes past a piece, shows in the data.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <vector>

namespace softverbs::testsupport {

// One SGE's share of a message.
struct SgePiece {
  uint64_t buffer_offset = 0;   // where the piece sits in the local buffer
  uint64_t message_offset = 0;  // which bytes of the message it carries
  uint32_t length = 0;
};

// Splits `message_length` bytes over `count` pieces (each at least one byte,
// lengths rising with the index when `ascending`, falling otherwise, the
// rounding leftovers going to the last piece), placed from `first_offset`
// on with `gap` bytes between neighbours.
// `count` must be at most `message_length`; an empty message has no pieces.
std::vector<SgePiece> uneven_sge_layout(uint64_t message_length, uint32_t count,
                                        uint64_t first_offset, uint64_t gap, bool ascending);

// The buffer offset just past the last piece (`first_offset` when empty).
uint64_t layout_end(const std::vector<SgePiece>& pieces, uint64_t first_offset);

// The SGEs for `pieces` in a buffer at `base_address` registered with `lkey`.
std::vector<ibv_sge> sges_for(const std::vector<SgePiece>& pieces, uint64_t base_address,
                              uint32_t lkey);

}  // namespace softverbs::testsupport
