// Shared by the shared-memory wire tests (shm_wire_test.cc and
// shm_wire_ring_test.cc): a process's endpoint, numbered frames sent and
// received in order, the fixture, and a receiver that never polls.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "emulator/wire/mailbox_slots.h"
#include "emulator/wire/shm_registry.h"
#include "emulator/wire/shm_wire.h"
#include "emulator/wire/wire_test_support.h"

namespace softverbs::testing {

inline constexpr uint32_t kDevice = 0;

// A process's end of the wire: registry, wire, and one QPN to be reached at.
struct Endpoint {
  std::unique_ptr<ShmRegistry> registry;
  std::unique_ptr<ShmWire> wire;
  uint32_t qpn = 0;
  uint32_t mailbox_slots = kDefaultMailboxSlots;

  bool open() {
    Errno err = 0;
    registry = ShmRegistry::attach(err);
    if (!registry) return false;
    wire = ShmWire::create(*registry, mailbox_slots, err);
    if (!wire) return false;
    return registry->allocate_qpn(kDevice, qpn) == 0;
  }
  ~Endpoint() {
    wire.reset();  // before the registry it was built on
    registry.reset();
  }
};

inline const auto kIgnoreFrames = [](std::span<const uint8_t>) {};

// Sends frame `sequence` (its size and bytes a function of the number),
// then pushes held frames on until none is held, so the sender never runs
// more than one ring ahead of its receiver.
inline bool send_numbered(ShmWire& wire, uint32_t qpn, uint64_t sequence, size_t min_size,
                          std::vector<uint8_t>& buffer) {
  const size_t size = frame_size_for(sequence, min_size, kShmMaxFrameBytes);
  std::span<uint8_t> frame(buffer.data(), size);
  testing::fill_frame(sequence, frame);
  return wire.send(WireAddress{kDevice, qpn}, frame);
}

inline void drain_deferred(ShmWire& wire) {
  while (wire.has_deferred()) {
    wire.poll(kIgnoreFrames, 0);
    std::this_thread::yield();
  }
}

// Receives `count` numbered frames in order; true when all were intact.
inline bool receive_numbered(ShmWire& wire, uint64_t count, size_t min_size) {
  uint64_t expected = 0;
  bool intact = true;
  auto check = [&](std::span<const uint8_t> frame) {
    intact = intact && frame.size() == frame_size_for(expected, min_size, kShmMaxFrameBytes) &&
             frame_matches(expected, frame);
    ++expected;
  };
  while (expected < count) {
    if (wire.poll(check, 256) == 0) wire.wait(10'000'000);
  }
  return intact;
}

class ShmWireTest : public ::testing::Test {
 protected:
  void TearDown() override { testing::remove_segments_of_current_prefix(); }
  testing::ScopedShmPrefix prefix_;
  testing::Watchdog watchdog_{900};
};

// A child that opens an endpoint, reports it, and never polls.
inline pid_t spawn_deaf_receiver(Pipe& report) {
  return fork_child([&report] {
    Endpoint end;
    if (!end.open()) return 1;
    report.write(end.qpn);
    for (;;) pause();
  });
}

}  // namespace softverbs::testing
