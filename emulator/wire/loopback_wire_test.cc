// The loopback wire's send_with(): Wire's default, which has the writer
// write into a private buffer and sends what it wrote.
#include "emulator/wire/loopback_wire.h"

#include <gtest/gtest.h>

#include <vector>

namespace softverbs {
namespace {

// Writes `bytes` (nothing when empty) and remembers the room it was given.
class FixedWriter final : public FrameWriter {
 public:
  explicit FixedWriter(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  size_t write(std::span<uint8_t> room) override {
    ++calls;
    room_bytes = room.size();
    if (bytes_.size() > room.size()) return room.size() + 1;  // claims more than it had
    std::copy(bytes_.begin(), bytes_.end(), room.begin());
    return bytes_.size();
  }
  int calls = 0;
  size_t room_bytes = 0;

 private:
  std::vector<uint8_t> bytes_;
};

std::vector<std::vector<uint8_t>> drain(LoopbackWire& wire) {
  std::vector<std::vector<uint8_t>> frames;
  wire.poll([&](std::span<const uint8_t> f) { frames.emplace_back(f.begin(), f.end()); }, 100);
  return frames;
}

TEST(LoopbackWireSendWith, SendsExactlyWhatTheWriterWrote) {
  LoopbackWire wire;
  FixedWriter writer({1, 2, 3, 4, 5});
  EXPECT_TRUE(wire.send_with(WireAddress{0, 9}, 64, writer));
  EXPECT_EQ(writer.calls, 1);
  EXPECT_EQ(writer.room_bytes, 64u);
  EXPECT_EQ(drain(wire), (std::vector<std::vector<uint8_t>>{{1, 2, 3, 4, 5}}));
  EXPECT_EQ(wire.counters().frames_sent, 1u);
}

TEST(LoopbackWireSendWith, AWriterThatWritesNothingOrTooMuchSendsNothing) {
  LoopbackWire wire;
  FixedWriter nothing({});
  EXPECT_FALSE(wire.send_with(WireAddress{0, 9}, 64, nothing));
  FixedWriter too_much(std::vector<uint8_t>(65, 7));
  EXPECT_FALSE(wire.send_with(WireAddress{0, 9}, 64, too_much));
  EXPECT_EQ(wire.queued(), 0u);
  EXPECT_EQ(wire.counters().frames_sent, 0u);
}

TEST(LoopbackWireSendWith, FramesKeepTheirOrderWithSend) {
  LoopbackWire wire;
  FixedWriter first({1});
  const std::vector<uint8_t> second{2, 2};
  FixedWriter third({3, 3, 3});
  wire.send_with(WireAddress{}, 8, first);
  wire.send(WireAddress{}, second);
  wire.send_with(WireAddress{}, 8, third);
  EXPECT_EQ(drain(wire), (std::vector<std::vector<uint8_t>>{{1}, {2, 2}, {3, 3, 3}}));
}

TEST(LoopbackWireSendWith, TheFilterSeesFramesWrittenInPlace) {
  LoopbackWire wire;
  std::vector<std::vector<uint8_t>> seen;
  wire.set_filter([&](std::span<const uint8_t> frame) {
    seen.emplace_back(frame.begin(), frame.end());
    return false;  // lost on the wire
  });
  FixedWriter writer({9, 8, 7});
  EXPECT_TRUE(wire.send_with(WireAddress{}, 16, writer));
  EXPECT_EQ(seen, (std::vector<std::vector<uint8_t>>{{9, 8, 7}}));
  EXPECT_EQ(wire.queued(), 0u);
}

}  // namespace
}  // namespace softverbs
