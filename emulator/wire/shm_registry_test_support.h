// Shared by the shared registry tests (shm_registry_test.cc and
// shm_registry_cleanup_test.cc): the fixture, and a child that holds QPNs
// until it is killed.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "emulator/wire/shm_registry.h"
#include "emulator/wire/shm_wire.h"
#include "emulator/wire/wire_test_support.h"

namespace softverbs::testing {

class ShmRegistryTest : public ::testing::Test {
 protected:
  void TearDown() override { testing::remove_segments_of_current_prefix(); }

  static std::unique_ptr<ShmRegistry> attach() {
    Errno err = 0;
    auto registry = ShmRegistry::attach(err);
    EXPECT_NE(registry, nullptr) << "attach failed, errno " << err;
    return registry;
  }

  testing::ScopedShmPrefix prefix_;
  testing::Watchdog watchdog_{300};
};

// A child that attaches, creates its mailbox, takes `count` QPNs of device
// 0, reports its ProcessRef and QPNs, then waits to be killed.
inline pid_t spawn_qpn_holder(Pipe& report, uint32_t count) {
  return fork_child([&report, count] {
    Errno err = 0;
    auto registry = ShmRegistry::attach(err);
    if (!registry) return 1;
    auto wire = ShmWire::create(*registry, err);
    if (!wire) return 2;
    std::vector<uint32_t> qpns(count);
    for (uint32_t& qpn : qpns) {
      if (registry->allocate_qpn(0, qpn) != 0) return 3;
    }
    ProcessRef self = registry->self();
    report.write(self);
    report.write_bytes(qpns.data(), qpns.size() * sizeof(uint32_t));
    for (;;) pause();
  });
}

}  // namespace softverbs::testing
