// The shared registry with real processes: QPN uniqueness across processes,
// reclaiming what a killed process held, segment permissions, and the
// registry lock and liveness. Leaving nothing in /dev/shm once the last user
// is gone: shm_registry_cleanup_test.cc.
#include "emulator/wire/shm_registry.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <atomic>
#include <set>
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

TEST_F(ShmRegistryTest, AttachClaimsASlotForThisProcess) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  const ProcessRef self = registry->self();
  EXPECT_EQ(self.pid, static_cast<uint32_t>(getpid()));
  EXPECT_NE(self.generation, 0u);
  EXPECT_LT(self.slot, ShmRegistry::kMaxProcesses);
  EXPECT_TRUE(registry->is_alive(self));
}

TEST_F(ShmRegistryTest, TwoAttachmentsGetDistinctSlotsAndGenerations) {
  auto first = attach();
  auto second = attach();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  EXPECT_NE(first->self().slot, second->self().slot);
  EXPECT_NE(first->self().generation, second->self().generation);
}

TEST_F(ShmRegistryTest, SegmentsAreOwnedByTheUserWithMode0600) {
  const mode_t old_umask = umask(0);  // a permissive umask must not widen them
  auto registry = attach();
  Errno err = 0;
  auto wire = registry ? ShmWire::create(*registry, err) : nullptr;
  umask(old_umask);
  ASSERT_NE(registry, nullptr);
  ASSERT_NE(wire, nullptr) << err;
  for (const std::string& name :
       {ShmRegistry::segment_name(), ShmRegistry::mailbox_name(registry->self())}) {
    struct stat st;
    ASSERT_EQ(stat(shm_file_path(name).c_str(), &st), 0) << name;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << name;
    EXPECT_EQ(st.st_uid, geteuid()) << name;
  }
}

TEST_F(ShmRegistryTest, ASegmentReadableByOthersIsRefusedWithEacces) {
  const std::string name = ShmRegistry::segment_name();
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0644);
  ASSERT_GE(fd, 0);
  fchmod(fd, 0644);
  close(fd);
  Errno err = 0;
  EXPECT_EQ(ShmRegistry::attach(err), nullptr);
  EXPECT_EQ(err, EACCES);
  shm_unlink(name.c_str());
}

TEST_F(ShmRegistryTest, AnUnusablePrefixIsRefusedWithEinval) {
  setenv(kShmPrefixVariable, "not/a/name", 1);
  Errno err = 0;
  EXPECT_EQ(ShmRegistry::attach(err), nullptr);
  EXPECT_EQ(err, EINVAL);
}

TEST_F(ShmRegistryTest, QpnsZeroAndOneAreNeverHandedOutAndTheSpaceRunsOutWithEagain) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  std::vector<bool> seen(1u << 24, false);
  uint32_t count = 0;
  uint32_t qpn = 0;
  Errno err = 0;
  while ((err = registry->allocate_qpn(2, qpn)) == 0) {
    ASSERT_GE(qpn, 2u);
    ASSERT_LT(qpn, 1u << 24);
    ASSERT_FALSE(seen[qpn]) << "QPN " << qpn << " handed out twice";
    seen[qpn] = true;
    ++count;
  }
  EXPECT_EQ(err, EAGAIN);
  EXPECT_EQ(count, ShmRegistry::kQpnsPerDevice);
  EXPECT_GE(count, 65536u);
  // One freed QPN is the only one left to hand out.
  registry->release_qpn(2, 1000);
  ASSERT_EQ(registry->allocate_qpn(2, qpn), 0);
  EXPECT_EQ(qpn, 1000u);
}

TEST_F(ShmRegistryTest, AFreedQpnIsNotTheNextOneHandedOut) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  uint32_t first = 0;
  ASSERT_EQ(registry->allocate_qpn(0, first), 0);
  registry->release_qpn(0, first);
  std::set<uint32_t> next;
  for (int i = 0; i < 100; ++i) {
    uint32_t qpn = 0;
    ASSERT_EQ(registry->allocate_qpn(0, qpn), 0);
    next.insert(qpn);
  }
  EXPECT_EQ(next.count(first), 0u);
}

TEST_F(ShmRegistryTest, EachDeviceHasItsOwnQpnSpace) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  uint32_t on_device_3 = 0;
  uint32_t on_device_15 = 0;
  ASSERT_EQ(registry->allocate_qpn(3, on_device_3), 0);
  ASSERT_EQ(registry->allocate_qpn(15, on_device_15), 0);
  EXPECT_EQ(on_device_3, on_device_15);  // both spaces were empty
  ProcessRef owner;
  EXPECT_TRUE(registry->lookup_qpn(15, on_device_15, owner));
  uint32_t qpn = 0;
  EXPECT_EQ(registry->allocate_qpn(16, qpn), EINVAL);
}

TEST_F(ShmRegistryTest, LookupNamesTheOwnerUntilTheQpnIsReleased) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  uint32_t qpn = 0;
  ASSERT_EQ(registry->allocate_qpn(1, qpn), 0);
  ProcessRef owner;
  ASSERT_TRUE(registry->lookup_qpn(1, qpn, owner));
  EXPECT_EQ(owner.pid, static_cast<uint32_t>(getpid()));
  EXPECT_EQ(owner.slot, registry->self().slot);
  EXPECT_EQ(owner.generation, registry->self().generation);
  EXPECT_FALSE(registry->lookup_qpn(0, qpn, owner));  // other device
  registry->release_qpn(1, qpn);
  EXPECT_FALSE(registry->lookup_qpn(1, qpn, owner));
  EXPECT_FALSE(registry->lookup_qpn(1, 0, owner));
  EXPECT_FALSE(registry->lookup_qpn(1, 1u << 24, owner));
}

TEST_F(ShmRegistryTest, OnlyTheOwnerCanReleaseAQpn) {
  auto owner_registry = attach();
  auto other = attach();
  ASSERT_NE(owner_registry, nullptr);
  ASSERT_NE(other, nullptr);
  uint32_t qpn = 0;
  ASSERT_EQ(owner_registry->allocate_qpn(0, qpn), 0);
  other->release_qpn(0, qpn);
  ProcessRef owner;
  ASSERT_TRUE(other->lookup_qpn(0, qpn, owner));
  EXPECT_EQ(owner.generation, owner_registry->self().generation);
}

TEST_F(ShmRegistryTest, QpnsAreUniqueAcrossFourProcessesAllocatingAtOnce) {
  constexpr int kChildren = 4;
  constexpr uint32_t kEach = 1000;
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  Pipe ready, go, results, release;
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    children.push_back(fork_child([&] {
      Errno err = 0;
      auto mine = ShmRegistry::attach(err);
      if (!mine) return 1;
      ready.write(uint8_t{1});
      uint8_t token = 0;
      if (!go.read(token)) return 2;
      std::vector<uint32_t> qpns(kEach);
      for (uint32_t& qpn : qpns) {
        if (mine->allocate_qpn(0, qpn) != 0) return 3;
      }
      // One message per child, so the parent can tell whose QPNs are whose.
      std::vector<uint32_t> message{static_cast<uint32_t>(getpid())};
      message.insert(message.end(), qpns.begin(), qpns.end());
      results.write_bytes(message.data(), message.size() * sizeof(uint32_t));
      if (!release.read(token)) return 4;  // hold them until the parent checked
      return 0;
    }));
  }
  for (int c = 0; c < kChildren; ++c) {
    uint8_t token = 0;
    ASSERT_TRUE(ready.read(token));
  }
  for (int c = 0; c < kChildren; ++c) go.write(uint8_t{1});

  std::set<uint32_t> all;
  for (int c = 0; c < kChildren; ++c) {
    std::vector<uint32_t> message(1 + kEach);
    ASSERT_TRUE(results.read_bytes(message.data(), message.size() * sizeof(uint32_t)));
    for (uint32_t i = 1; i <= kEach; ++i) {
      const uint32_t qpn = message[i];
      EXPECT_GE(qpn, 2u);
      EXPECT_TRUE(all.insert(qpn).second) << "QPN " << qpn << " handed out twice";
      ProcessRef owner;
      ASSERT_TRUE(registry->lookup_qpn(0, qpn, owner));
      EXPECT_EQ(owner.pid, message[0]);
    }
  }
  EXPECT_EQ(all.size(), kChildren * kEach);
  for (int c = 0; c < kChildren; ++c) release.write(uint8_t{1});
  for (pid_t child : children) EXPECT_EQ(wait_child(child), 0);
}

TEST_F(ShmRegistryTest, KilledProcessIsReclaimedByTheNextAllocation) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  Pipe report;
  constexpr uint32_t kHeld = 100;
  pid_t child = spawn_qpn_holder(report, kHeld);
  ProcessRef dead;
  std::vector<uint32_t> held(kHeld);
  ASSERT_TRUE(report.read(dead));
  ASSERT_TRUE(report.read_bytes(held.data(), held.size() * sizeof(uint32_t)));
  const std::string mailbox = shm_file_path(ShmRegistry::mailbox_name(dead));
  EXPECT_TRUE(testing::file_exists(mailbox));

  kill(child, SIGKILL);
  EXPECT_EQ(wait_child(child), 128 + SIGKILL);
  ProcessRef owner;
  EXPECT_FALSE(registry->is_alive(dead));
  EXPECT_FALSE(registry->lookup_qpn(0, held[0], owner));  // dead owner
  EXPECT_TRUE(registry->find_qpn_owner(0, held[0], owner));  // not reclaimed yet

  uint32_t qpn = 0;
  ASSERT_EQ(registry->allocate_qpn(0, qpn), 0);  // reclaims
  EXPECT_FALSE(testing::file_exists(mailbox));
  for (uint32_t q : held) EXPECT_FALSE(registry->find_qpn_owner(0, q, owner)) << q;

  // The whole space is ours again, the dead process's QPNs included.
  uint32_t count = 1;
  while (registry->allocate_qpn(0, qpn) == 0) ++count;
  EXPECT_EQ(count, ShmRegistry::kQpnsPerDevice);

  // And its slot serves the next process, under a new generation.
  Pipe next;
  pid_t successor = fork_child([&] {
    Errno err = 0;
    auto mine = ShmRegistry::attach(err);
    if (!mine) return 1;
    next.write(mine->self());
    return 0;
  });
  ProcessRef reused;
  ASSERT_TRUE(next.read(reused));
  EXPECT_EQ(wait_child(successor), 0);
  EXPECT_EQ(reused.slot, dead.slot);
  EXPECT_GT(reused.generation, dead.generation);
}

// A child that takes the registry lock the way the registry does (a record
// lock on the segment's first byte, through its own open of the segment),
// reports, and keeps it until it is killed or stopped.
pid_t spawn_lock_holder(Pipe& report) {
  return fork_child([&report] {
    const int fd = open(shm_file_path(ShmRegistry::segment_name()).c_str(), O_RDWR);
    if (fd < 0) return 1;
    struct flock range {};
    range.l_type = F_WRLCK;
    range.l_whence = SEEK_SET;
    range.l_len = 1;
    if (fcntl(fd, F_OFD_SETLK, &range) != 0) return 2;
    report.write(uint32_t{1});
    for (;;) pause();
  });
}

TEST_F(ShmRegistryTest, AHolderOfTheRegistryLockThatDiesReleasesIt) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  registry->set_lock_deadline(std::chrono::milliseconds(300));
  Pipe report;
  const pid_t holder = spawn_lock_holder(report);
  uint32_t ready = 0;
  ASSERT_TRUE(report.read(ready));

  // Held by a live process: the wait is bounded.
  uint32_t qpn = 0;
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(ETIMEDOUT, registry->allocate_qpn(0, qpn));
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(300));

  // Killed while holding it: the kernel drops the lock with the process.
  kill(holder, SIGKILL);
  EXPECT_EQ(wait_child(holder), 128 + SIGKILL);
  EXPECT_EQ(0, registry->allocate_qpn(0, qpn));
}

TEST_F(ShmRegistryTest, NoBytesWrittenIntoTheSegmentCanWedgeTheLock) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  registry->set_lock_deadline(std::chrono::milliseconds(2000));
  // A broken process of the same user scribbles over the tables (not the
  // header, which a newcomer checks): the lock lives in the kernel.
  const int fd = open(shm_file_path(ShmRegistry::segment_name()).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const size_t size = sizeof(RegistryLayout);
  auto* bytes = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(bytes, MAP_FAILED);
  // Everything after the header: where a lock word in the segment would be.
  const size_t tables = offsetof(RegistryLayout, total_bytes) + sizeof(uint64_t);
  for (size_t i = tables; i < tables + 4096; ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  munmap(bytes, size);
  close(fd);

  uint32_t qpn = 0;
  EXPECT_NE(ETIMEDOUT, registry->allocate_qpn(0, qpn));
  Pipe next;
  const pid_t newcomer = fork_child([&] {
    Errno err = 0;
    auto mine = ShmRegistry::attach(err);
    next.write(uint32_t(err));
    return 0;
  });
  uint32_t attach_error = 1;
  ASSERT_TRUE(next.read(attach_error));
  EXPECT_EQ(wait_child(newcomer), 0);
  EXPECT_NE(uint32_t(ETIMEDOUT), attach_error) << "a newcomer waited on a scribbled lock";
}

// A process of another PID namespace (a container sharing /dev/shm) has a
// pid that means nothing here, or names another process: its record lock
// tells it alive until the kernel drops it with the process.
TEST_F(ShmRegistryTest, AProcessOfAnotherPidNamespaceIsAliveUntilItDies) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  Pipe report;
  const pid_t child = spawn_qpn_holder(report, 1);
  ProcessRef other;
  uint32_t qpn = 0;
  ASSERT_TRUE(report.read(other));
  ASSERT_TRUE(report.read_bytes(&qpn, sizeof qpn));

  // Seen from here, its pid is one of ours (our own, alive) or none at all:
  // neither may decide.
  const int fd = open(shm_file_path(ShmRegistry::segment_name()).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  auto* layout = static_cast<RegistryLayout*>(
      mmap(nullptr, sizeof(RegistryLayout), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  ASSERT_NE(layout, MAP_FAILED);
  RegistryProcessSlot& slot = layout->slots[other.slot];
  std::atomic_ref<uint32_t>(slot.pid).store(0x7ffffff0u);  // no such pid here
  EXPECT_TRUE(registry->is_alive(other));
  uint32_t fresh = 0;
  ASSERT_EQ(0, registry->allocate_qpn(0, fresh));  // reclaims nothing alive
  ProcessRef owner;
  EXPECT_TRUE(registry->lookup_qpn(0, qpn, owner)) << "a live process lost its QPN";

  kill(child, SIGKILL);
  EXPECT_EQ(wait_child(child), 128 + SIGKILL);
  EXPECT_FALSE(registry->is_alive(other));
  ASSERT_EQ(0, registry->allocate_qpn(0, fresh));  // reclaims the dead one
  EXPECT_FALSE(registry->find_qpn_owner(0, qpn, owner));
  munmap(layout, sizeof(RegistryLayout));
  close(fd);
}

// A child forked without exec shares the parent's descriptor, and with it
// the parent's liveness lock, unless it lets go of it: the parent killed,
// its slot must be free at once though the child lives on.
TEST_F(ShmRegistryTest, AForkedChildDoesNotKeepADeadParentAlive) {
  auto observer = attach();
  ASSERT_NE(observer, nullptr);
  Pipe report;
  Pipe forked;
  const pid_t parent = fork_child([&report, &forked] {
    Errno err = 0;
    auto registry = ShmRegistry::attach(err);
    if (!registry) return 1;
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      // Past fork(): whatever the child does at fork is done.
      forked.write(uint32_t(getpid()));
      for (;;) pause();  // outlives its parent, holding whatever it inherited
    }
    uint32_t ready = 0;
    if (!forked.read(ready)) return 2;
    report.write(registry->self());
    report.write(uint32_t(grandchild));
    for (;;) pause();
  });
  ProcessRef dead;
  uint32_t grandchild = 0;
  ASSERT_TRUE(report.read(dead));
  ASSERT_TRUE(report.read(grandchild));
  EXPECT_TRUE(observer->is_alive(dead));
  kill(parent, SIGKILL);
  EXPECT_EQ(wait_child(parent), 128 + SIGKILL);
  EXPECT_FALSE(observer->is_alive(dead)) << "its forked child kept the parent's lock";
  kill(static_cast<pid_t>(grandchild), SIGKILL);
}

TEST_F(ShmRegistryTest, KilledLastUserIsReclaimedByTheNextAttach) {
  Pipe report;
  pid_t child = spawn_qpn_holder(report, 10);
  ProcessRef dead;
  std::vector<uint32_t> held(10);
  ASSERT_TRUE(report.read(dead));
  ASSERT_TRUE(report.read_bytes(held.data(), held.size() * sizeof(uint32_t)));
  kill(child, SIGKILL);
  EXPECT_EQ(wait_child(child), 128 + SIGKILL);
  // It was the only user: everything it had is still there.
  const std::string mailbox = shm_file_path(ShmRegistry::mailbox_name(dead));
  EXPECT_TRUE(testing::file_exists(mailbox));
  EXPECT_TRUE(testing::file_exists(shm_file_path(ShmRegistry::segment_name())));

  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  EXPECT_FALSE(testing::file_exists(mailbox));
  ProcessRef owner;
  for (uint32_t q : held) EXPECT_FALSE(registry->find_qpn_owner(0, q, owner)) << q;
  registry.reset();
  EXPECT_TRUE(testing::segments_of_current_prefix().empty());
}

TEST_F(ShmRegistryTest, AnUnreapedDeadProcessCountsAsDead) {
  auto registry = attach();
  ASSERT_NE(registry, nullptr);
  Pipe report;
  pid_t child = spawn_qpn_holder(report, 1);
  ProcessRef zombie;
  uint32_t qpn = 0;
  ASSERT_TRUE(report.read(zombie));
  ASSERT_TRUE(report.read(qpn));
  kill(child, SIGKILL);
  siginfo_t info{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT), 0);  // not reaped
  ProcessRef owner;
  EXPECT_FALSE(registry->is_alive(zombie));
  EXPECT_FALSE(registry->lookup_qpn(0, qpn, owner));
  EXPECT_EQ(wait_child(child), 128 + SIGKILL);
}

}  // namespace
}  // namespace softverbs
