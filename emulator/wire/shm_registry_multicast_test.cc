// The registry's table of multicast attachments: who is in a group, the
// per-group limit, a killed member's attachments reclaimed, and a table
// scribbled on by a broken peer read without harm.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <random>
#include <vector>

#include "emulator/wire/shm_registry.h"
#include "emulator/wire/wire_test_support.h"

namespace softverbs {
namespace {

using testing::fork_child;
using testing::Pipe;

Gid group(uint8_t n) {
  Gid gid{};
  gid[0] = 0xff;
  gid[1] = 0x12;
  gid[15] = n;
  return gid;
}

class ShmRegistryMulticast : public ::testing::Test {
 protected:
  void SetUp() override {
    Errno err = 0;
    registry_ = ShmRegistry::attach(err);
    ASSERT_TRUE(registry_) << err;
  }
  void TearDown() override {
    registry_.reset();
    testing::remove_segments_of_current_prefix();
  }
  std::vector<ShmRegistry::MulticastMember> members(const Gid& gid) {
    std::vector<ShmRegistry::MulticastMember> out;
    EXPECT_EQ(0, registry_->multicast_members(&gid, 0, out));
    return out;
  }

  testing::ScopedShmPrefix prefix_;
  testing::Watchdog watchdog_{120};
  std::unique_ptr<ShmRegistry> registry_;
};

TEST_F(ShmRegistryMulticast, MembersJoinOnceLeaveAndTheGroupHasALimit) {
  ASSERT_EQ(0, registry_->attach_multicast(0, group(1), 0xc001, 10));
  ASSERT_EQ(0, registry_->attach_multicast(0, group(1), 0xc001, 10));  // idempotent
  ASSERT_EQ(0, registry_->attach_multicast(1, group(1), 0xc001, 11));
  ASSERT_EQ(2u, members(group(1)).size());
  EXPECT_TRUE(members(group(2)).empty());
  std::vector<ShmRegistry::MulticastMember> by_lid;
  ASSERT_EQ(0, registry_->multicast_members(nullptr, 0xc001, by_lid));
  EXPECT_EQ(2u, by_lid.size());
  EXPECT_EQ(EINVAL, registry_->detach_multicast(0, group(1), 0xc002, 10)) << "another LID";
  ASSERT_EQ(0, registry_->detach_multicast(0, group(1), 0xc001, 10));
  ASSERT_EQ(1u, members(group(1)).size());
  for (uint32_t qpn = 100; qpn < 100 + kMaxMulticastQpsPerGroup - 1; ++qpn)
    ASSERT_EQ(0, registry_->attach_multicast(0, group(1), 0xc001, qpn));
  EXPECT_EQ(ENOMEM, registry_->attach_multicast(0, group(1), 0xc001, 999));
}

TEST_F(ShmRegistryMulticast, AKilledMembersAttachmentsAreReclaimed) {
  Pipe ready;
  const pid_t member = fork_child([&] {
    Errno err = 0;
    auto registry = ShmRegistry::attach(err);
    if (!registry || registry->attach_multicast(0, group(3), 0xc003, 42)) return 1;
    ready.write(uint8_t{1});
    for (;;) pause();
  });
  uint8_t token = 0;
  ASSERT_TRUE(ready.read(token));
  ASSERT_EQ(1u, members(group(3)).size());
  kill(member, SIGKILL);
  testing::wait_child(member);
  // The next attachment reclaims the dead process's slot and what it held.
  ASSERT_EQ(0, registry_->attach_multicast(0, group(4), 0xc004, 43));
  EXPECT_TRUE(members(group(3)).empty());
}

TEST_F(ShmRegistryMulticast, AScribbledTableIsReadWithoutHarm) {
  const int fd = shm_open(ShmRegistry::segment_name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  auto* layout = static_cast<RegistryLayout*>(
      mmap(nullptr, sizeof(RegistryLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  ASSERT_NE(layout, MAP_FAILED);
  std::mt19937 random(7);
  auto* bytes = reinterpret_cast<uint8_t*>(layout->multicast);
  for (size_t i = 0; i < sizeof(layout->multicast); ++i) bytes[i] = static_cast<uint8_t>(random());
  // Whatever a member reads, its device and QPN are ones a wire can route.
  for (uint8_t n = 0; n < 8; ++n) {
    std::vector<ShmRegistry::MulticastMember> out;
    ASSERT_EQ(0, registry_->multicast_members(nullptr, static_cast<uint16_t>(random()), out));
    for (const auto& m : out) {
      EXPECT_LT(m.device_index, ShmRegistry::kMaxDevices);
      EXPECT_LT(m.slot, ShmRegistry::kMaxProcesses);
    }
  }
  const Errno err = registry_->attach_multicast(0, group(5), 0xc005, 50);
  EXPECT_TRUE(err == 0 || err == ENOMEM) << err;
  munmap(layout, sizeof(RegistryLayout));
}

}  // namespace
}  // namespace softverbs
