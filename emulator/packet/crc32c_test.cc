#include "emulator/packet/crc32c.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

namespace softverbs::packet {
namespace {

std::span<const uint8_t> bytes_of(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Crc32c, MatchesTheStandardCheckValue) {
  // The CRC-32C catalogue's check: "123456789" -> 0xE3069283.
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xe3069283u);
  EXPECT_EQ(crc32c({}), 0u);
}

TEST(Crc32c, TheInstructionAndTheTableAgreeAtEveryLengthAndAlignment) {
  std::vector<uint8_t> data(300);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t start = 0; start < 9; ++start)
    for (size_t length = 0; start + length <= data.size(); length += 13)
      EXPECT_EQ(crc32c_update(~0u, data.data() + start, length),
                crc32c_table_update(~0u, data.data() + start, length))
          << start << " " << length;
}

TEST(Crc32c, UpdatesInPiecesAsInOne) {
  const std::string_view text = "placed SENDs carry a checksum of their own";
  const uint32_t whole = crc32c(bytes_of(text));
  uint32_t state = ~0u;
  state = crc32c_update(state, bytes_of(text).data(), 10);
  state = crc32c_update(state, bytes_of(text).data() + 10, text.size() - 10);
  EXPECT_EQ(~state, whole);
}

}  // namespace
}  // namespace softverbs::packet
