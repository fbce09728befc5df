#include "emulator/transport/congestion_window.h"

#include <gtest/gtest.h>

namespace softverbs {
namespace {

TEST(CongestionWindow, ALosslessWireKeepsTheTransportLimit) {
  CongestionWindow w(256);
  w.on_acknowledged(100000);
  EXPECT_EQ(w.packets(), 256u);
}

TEST(CongestionWindow, LossHalvesItOncePerWindowOfData) {
  CongestionWindow w(256);
  w.on_loss(/*lost_psn=*/10, /*next_psn=*/200);
  EXPECT_EQ(w.packets(), 128u);
  // More losses among what was in flight then are the same episode.
  w.on_loss(50, 210);
  w.on_loss(199, 220);
  EXPECT_EQ(w.packets(), 128u);
  // A loss past it is a new one.
  w.on_loss(200, 300);
  EXPECT_EQ(w.packets(), 64u);
}

TEST(CongestionWindow, ItNeverShrinksBelowTheMinimum) {
  CongestionWindow w(256);
  uint32_t psn = 0;
  for (int i = 0; i < 20; ++i, psn += 1000) w.on_loss(psn, psn + 1);
  EXPECT_EQ(w.packets(), CongestionWindow::kMinPackets);
}

TEST(CongestionWindow, EachWindowOfAcknowledgedPacketsGrowsItByOne) {
  CongestionWindow w(256);
  w.on_loss(0, 1);
  ASSERT_EQ(w.packets(), 128u);
  w.on_acknowledged(127);
  EXPECT_EQ(w.packets(), 128u);
  w.on_acknowledged(1);
  EXPECT_EQ(w.packets(), 129u);
  w.on_acknowledged(129 + 130);
  EXPECT_EQ(w.packets(), 131u);
}

TEST(CongestionWindow, PsnsWrapAroundTheirTwentyFourBits) {
  CongestionWindow w(256);
  w.on_loss(0xfffff0, 0x000010);  // the episode runs past the wrap
  w.on_loss(0x000005, 0x000020);
  EXPECT_EQ(w.packets(), 128u);
  w.on_loss(0x000010, 0x000030);
  EXPECT_EQ(w.packets(), 64u);
}

TEST(CongestionWindow, ResetRestoresTheLimit) {
  CongestionWindow w(256);
  w.on_loss(0, 1);
  w.reset();
  EXPECT_EQ(w.packets(), 256u);
}

}  // namespace
}  // namespace softverbs
