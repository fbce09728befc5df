// The shared registry leaving nothing in /dev/shm once the last user is
// gone: after clean exits and crashes, with processes attaching and leaving
// at once, with forked copies, with mailboxes no slot accounts for, and
// with the prefix changed after attaching, and under prefixes whose every
// process ended.
#include "emulator/wire/shm_registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>

#include <array>
#include <string>
#include <vector>

#include "emulator/wire/shm_names.h"
#include "emulator/wire/shm_registry_test_support.h"
#include "emulator/wire/shm_wire.h"
#include "emulator/wire/wire_test_support.h"

namespace softverbs {
namespace {

using testing::fork_child;
using testing::Pipe;
using testing::ShmRegistryTest;
using testing::spawn_qpn_holder;
using testing::wait_child;

TEST_F(ShmRegistryTest, NothingIsLeftInDevShmAfterTheLastUserDetaches) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  Errno err = 0;
  auto wire = ShmWire::create(*registry, err);
  ASSERT_NE(wire, nullptr);
  Pipe done;
  std::vector<pid_t> children;
  for (int c = 0; c < 3; ++c) {
    children.push_back(fork_child([&] {
      Errno e = 0;
      auto mine = ShmRegistry::attach(e);
      if (!mine) return 1;
      auto my_wire = ShmWire::create(*mine, e);
      if (!my_wire) return 2;
      uint32_t qpn = 0;
      if (mine->allocate_qpn(0, qpn) != 0) return 3;
      done.write(uint8_t{1});
      return 0;  // leaves with everything still held: the destructors tidy up
    }));
  }
  for (int c = 0; c < 3; ++c) {
    uint8_t token = 0;
    ASSERT_TRUE(done.read(token));
  }
  for (pid_t child : children) EXPECT_EQ(wait_child(child), 0);
  EXPECT_FALSE(testing::segments_of_current_prefix().empty());
  wire.reset();
  registry.reset();
  EXPECT_TRUE(testing::segments_of_current_prefix().empty());
}

TEST_F(ShmRegistryTest, LastUserLeavingAfterACrashRemovesTheDeadOnesSegmentsToo) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  Pipe report;
  pid_t child = spawn_qpn_holder(report, 5);
  ProcessRef dead;
  ASSERT_TRUE(report.read(dead));
  kill(child, SIGKILL);
  wait_child(child);
  EXPECT_TRUE(testing::file_exists(shm_file_path(ShmRegistry::mailbox_name(dead))));
  registry.reset();
  EXPECT_TRUE(testing::segments_of_current_prefix().empty());
}

TEST_F(ShmRegistryTest, ProcessesAttachingAndLeavingAtOnceLeaveNothingBehind) {
  constexpr int kChildren = 4;
  constexpr int kRounds = 40;
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    children.push_back(fork_child([] {
      for (int round = 0; round < kRounds; ++round) {
        Errno err = 0;
        auto registry = ShmRegistry::attach(err);
        if (!registry) return 10 + err;
        auto wire = ShmWire::create(*registry, err);
        if (!wire) return 50 + err;
        uint32_t qpn = 0;
        if (registry->allocate_qpn(0, qpn) != 0) return 3;
        ProcessRef owner;
        if (!registry->lookup_qpn(0, qpn, owner) || owner.pid != static_cast<uint32_t>(getpid())) {
          return 4;
        }
      }
      return 0;
    }));
  }
  for (pid_t child : children) EXPECT_EQ(wait_child(child), 0);
  EXPECT_TRUE(testing::segments_of_current_prefix().empty());
}

TEST_F(ShmRegistryTest, AForkedCopyLeavingDoesNotDetachTheParent) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  Errno err = 0;
  auto wire = ShmWire::create(*registry, err);
  ASSERT_NE(wire, nullptr);
  uint32_t qpn = 0;
  ASSERT_EQ(registry->allocate_qpn(0, qpn), 0);
  pid_t child = fork_child([&] {
    wire.reset();  // the inherited copies go away in the child
    registry.reset();
    return 0;
  });
  EXPECT_EQ(wait_child(child), 0);
  ProcessRef owner;
  EXPECT_TRUE(registry->lookup_qpn(0, qpn, owner));
  EXPECT_TRUE(registry->is_alive(registry->self()));
  EXPECT_TRUE(testing::file_exists(shm_file_path(ShmRegistry::mailbox_name(registry->self()))));
  EXPECT_TRUE(testing::file_exists(shm_file_path(ShmRegistry::segment_name())));
}

// Creates a segment named like a mailbox that no slot accounts for.
void plant_segment(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd >= 0) close(fd);
}

TEST_F(ShmRegistryTest, MailboxesLeftFromAnEarlierRegistryAreRemovedByItsSuccessor) {
  const std::string stray = mailbox_segment_name(5, 77);
  const std::string unrelated = "/" + shm_user_stem() + "mbox-notes";
  plant_segment(stray);
  plant_segment(unrelated);
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  EXPECT_FALSE(testing::file_exists(shm_file_path(stray)));
  EXPECT_TRUE(testing::file_exists(shm_file_path(unrelated)));  // not a mailbox name
  shm_unlink(unrelated.c_str());
}

TEST_F(ShmRegistryTest, TheLastUserRemovesMailboxesNoSlotAccountsFor) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  const std::string stray = mailbox_segment_name(9, 12345);
  plant_segment(stray);
  registry.reset();
  EXPECT_TRUE(testing::segments_of_current_prefix().empty());
}

TEST_F(ShmRegistryTest, ChangingThePrefixAfterAttachingChangesNothing) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  Errno err = 0;
  auto wire = ShmWire::create(*registry, err);
  ASSERT_NE(wire, nullptr);
  const std::string mailbox = ShmRegistry::mailbox_name(registry->self());
  const std::string attached_prefix = shm_prefix();
  {
    testing::ScopedShmPrefix another;
    EXPECT_EQ(registry->mailbox_name_of(registry->self()), mailbox);
    uint32_t qpn = 0;
    ASSERT_EQ(registry->allocate_qpn(0, qpn), 0);
    const std::array<uint8_t, 2> frame{1, 2};
    EXPECT_TRUE(wire->send(WireAddress{0, qpn}, frame));
    EXPECT_EQ(wire->poll([](std::span<const uint8_t>) {}, 4), 1u);
    wire.reset();
    registry.reset();
  }
  ASSERT_EQ(shm_prefix(), attached_prefix);
  EXPECT_TRUE(testing::segments_of_current_prefix().empty());
}

// Every /dev/shm file whose name starts with "<prefix>-".
std::vector<std::string> files_of_prefix(const std::string& prefix) {
  std::vector<std::string> files;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return files;
  while (const dirent* entry = readdir(dir)) {
    const std::string file = entry->d_name;
    if (file.rfind(prefix + "-", 0) == 0) files.push_back(file);
  }
  closedir(dir);
  return files;
}

// As CI jobs that give every run a prefix of its own: a run whose processes
// all ended without detaching (_exit(), SIGKILL) is gone once the next
// softverbs process of the user attaches, whatever its prefix; a run still
// going and a registry that is not this version's stay.
TEST_F(ShmRegistryTest, RunsUnderOtherPrefixesThatAllEndedLeaveNothingForTheNextProcess) {
  const std::string ended = prefix_.prefix() + "x";
  const std::string going = prefix_.prefix() + "y";
  const std::string damaged = prefix_.prefix() + "z";
  auto attach_under = [](const std::string& prefix) {
    setenv("SOFTVERBS_SHM_PREFIX", prefix.c_str(), 1);
    Errno err = 0;
    auto registry = ShmRegistry::attach(err);
    auto wire = registry ? ShmWire::create(*registry, err) : nullptr;
    return std::make_pair(std::move(registry), std::move(wire));
  };
  // The run still going starts first: attaching, it sweeps ended runs itself.
  Pipe ready;
  pid_t alive = fork_child([&] {
    auto [registry, wire] = attach_under(going);
    if (!wire) return 1;
    ready.write(uint8_t{1});
    for (;;) pause();
  });
  uint8_t token = 0;
  ASSERT_TRUE(ready.read(token));
  pid_t child = fork_child([&] {
    auto [registry, wire] = attach_under(ended);
    if (!wire) return 1;
    _exit(0);  // no destructor runs: registry and mailbox stay behind
  });
  ASSERT_EQ(wait_child(child), 0);
  plant_segment("/" + damaged + "-" + std::to_string(geteuid()) + "-registry");
  EXPECT_EQ(files_of_prefix(ended).size(), 2u);  // its registry and its mailbox

  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  EXPECT_TRUE(files_of_prefix(ended).empty());
  EXPECT_EQ(files_of_prefix(going).size(), 2u);
  EXPECT_EQ(files_of_prefix(damaged).size(), 1u);

  kill(alive, SIGKILL);
  wait_child(alive);
  for (const std::string& prefix : {ended, going, damaged})
    for (const std::string& file : files_of_prefix(prefix)) shm_unlink(("/" + file).c_str());
}

}  // namespace
}  // namespace softverbs
