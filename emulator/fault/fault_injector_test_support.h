// Shared by the fault injector tests (fault_injector_test.cc and
// fault_injector_actions_test.cc): plans from text, the PSNs of frames, a
// wire that never allocates, and the fixture (an injector on the loopback
// wire and a manual clock).
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "emulator/fault/fault_injector.h"
#include "emulator/fault/fault_test_frames.h"
#include "emulator/packet/codec.h"
#include "emulator/wire/loopback_wire.h"

namespace softverbs::fault::testing {

inline constexpr uint32_t kQp = 0x12;
inline constexpr uint64_t kMs = 1'000'000;
inline constexpr uint64_t kUs = 1'000;

inline Plan plan_from(std::string_view text) {
  Plan plan;
  std::string error;
  EXPECT_TRUE(parse_plan(text, plan, error)) << error;
  return plan;
}

inline uint32_t psn_of(std::span<const uint8_t> frame) {
  packet::DecodedPacket packet;
  EXPECT_EQ(packet::decode_ib(frame, packet), packet::DecodeError::kNone);
  return packet.headers.bth.psn;
}

inline std::vector<uint32_t> psns_of(const std::vector<Bytes>& frames) {
  std::vector<uint32_t> psns;
  for (const Bytes& frame : frames) psns.push_back(psn_of(frame));
  return psns;
}

// A wire that never allocates (fixed slots).
class RingWire final : public Wire {
 public:
  bool send(const WireAddress&, std::span<const uint8_t> frame) override {
    if (count_ == kSlots || frame.size() > kSlotBytes) return false;
    Slot& slot = slots_[(head_ + count_++) % kSlots];
    std::memcpy(slot.bytes.data(), frame.data(), frame.size());
    slot.size = frame.size();
    return true;
  }
  size_t poll(const std::function<void(std::span<const uint8_t>)>& deliver,
              size_t budget) override {
    size_t n = 0;
    for (; n < budget && count_ > 0; ++n) {
      const Slot& slot = slots_[head_];
      head_ = (head_ + 1) % kSlots;
      --count_;
      deliver(std::span(slot.bytes.data(), slot.size));
    }
    return n;
  }
  bool has_deferred() const override { return false; }
  WireCounters counters() const override { return {}; }

 private:
  static constexpr size_t kSlots = 8, kSlotBytes = 256;
  struct Slot {
    std::array<uint8_t, kSlotBytes> bytes;
    size_t size = 0;
  };
  std::array<Slot, kSlots> slots_;
  size_t head_ = 0, count_ = 0;
};

class FaultInjectorTest : public ::testing::Test {
 protected:
  FaultInjectorTest() {
    auto wire = std::make_unique<LoopbackWire>();
    loopback_ = wire.get();
    injector_ = std::make_unique<FaultInjector>(std::move(wire), clock_);
  }

  void use(std::string_view text) { injector_->set_plan(plan_from(text)); }

  void send(const Bytes& frame, uint32_t qpn = kQp) {
    injector_->send(WireAddress{0, qpn}, frame);
  }

  // Sends frames with PSNs first..last to one QP.
  void send_psns(uint32_t first, uint32_t last, uint32_t qpn = kQp) {
    for (uint32_t psn = first; psn <= last; ++psn) send(make_frame(qpn, psn));
  }

  // Polls until neither the injector nor the loopback wire has anything due.
  std::vector<Bytes> poll_all() {
    std::vector<Bytes> delivered;
    const auto deliver = [&](std::span<const uint8_t> frame) {
      delivered.emplace_back(frame.begin(), frame.end());
    };
    while (injector_->poll(deliver, 16) > 0 || loopback_->queued() > 0) {
    }
    return delivered;
  }

  ManualClock clock_;
  LoopbackWire* loopback_ = nullptr;
  std::unique_ptr<FaultInjector> injector_;
};

}  // namespace softverbs::fault::testing
