// The target table and direct execution on their own: an initiator's
// checks, what it changes, and the shared lock words, within one process
// (cross-memory attach to oneself is allowed).
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include "emulator/same_host/direct_execution.h"
#include "emulator/same_host/target_table.h"
#include "emulator/sync/shared_lock_word.h"
#include "emulator/types.h"

namespace softverbs {
namespace {

constexpr uint32_t kDevice = 0, kTargetQpn = 0x11, kInitiatorQpn = 0x22, kRkey = 0x1234;
constexpr uint64_t kPd = 7, kIova = 0x10000;

struct Area {
  alignas(64) std::array<uint8_t, kMailboxTargetAreaBytes> bytes{};
};

class TargetTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    area_ = std::make_unique<Area>();
    table_ = std::make_unique<TargetTable>(area_->bytes);
    table_->set_accepting(true);
    entry_ = table_->add_qp(kDevice, kTargetQpn);
    ASSERT_NE(entry_, nullptr);
    entry_->open = 1;
    entry_->expected_psn = 100;
    entry_->msn = 5;
    entry_->access_flags = kAccessRemoteWrite | kAccessRemoteRead;
    entry_->pd = kPd;
    entry_->peer_key = target_qp_key(kDevice, kInitiatorQpn);
    reseal(*entry_, table_->seed());  // as the owner's QP step leaves it
    memory_.fill(0xee);
    table_->publish_mr(TargetMemory{kDevice, kRkey, kAccessRemoteWrite | kAccessRemoteRead, kPd,
                                   kIova, memory_.size(),
                                   reinterpret_cast<uint64_t>(memory_.data()), std::nullopt});
    source_.fill(0x5a);
  }

  DirectOperation write(uint64_t va, uint64_t length) {
    piece_ = RunPiece{reinterpret_cast<uint64_t>(source_.data()), length};
    return DirectOperation{.kind = DirectKind::kWrite,
                           .initiator_key = target_qp_key(kDevice, kInitiatorQpn),
                           .device_index = kDevice,
                           .qpn = kTargetQpn,
                           .psn = 100,
                           .packets = 1,
                           .rkey = kRkey,
                           .va = va,
                           .length = length,
                           .local = std::span<const RunPiece>(&piece_, 1)};
  }
  DirectResult execute(const DirectOperation& op) {
    return execute_directly(area_->bytes, op);
  }
  TargetTableLayout& layout() { return *reinterpret_cast<TargetTableLayout*>(area_->bytes.data()); }
  TargetMrEntry* mr_entry() {
    for (TargetMrEntry& e : layout().mrs)
      if (e.key == kRkey) return &e;
    return nullptr;
  }
  // Changes the QP entry as its owner does: sealed again.
  template <typename Fn>
  void change_qp(Fn&& fn) {
    fn(*entry_);
    reseal(*entry_, table_->seed());
  }
  bool memory_untouched() const {
    return std::all_of(memory_.begin(), memory_.end(), [](uint8_t b) { return b == 0xee; });
  }

  std::unique_ptr<Area> area_;
  std::unique_ptr<TargetTable> table_;
  TargetQpEntry* entry_ = nullptr;
  std::array<uint8_t, 256> memory_{};
  std::array<uint8_t, 256> source_{};
  RunPiece piece_;
};

TEST_F(TargetTableTest, AWriteLandsAndMovesTheResponderPastItsPackets) {
  DirectOperation op = write(kIova + 16, 32);
  op.packets = 3;
  ASSERT_EQ(execute(op), DirectResult::kExecuted);
  EXPECT_EQ(memory_[15], 0xee);
  EXPECT_EQ(memory_[16], 0x5a);
  EXPECT_EQ(memory_[47], 0x5a);
  EXPECT_EQ(memory_[48], 0xee);
  EXPECT_EQ(entry_->expected_psn, 103u);
  EXPECT_EQ(entry_->msn, 6u);
  EXPECT_EQ(entry_->executed, 1u);
  EXPECT_EQ(entry_->lock, 0u);
}

TEST_F(TargetTableTest, AnInitiatorLeavesTheEntrySealedForTheNext) {
  ASSERT_EQ(execute(write(kIova, 8)), DirectResult::kExecuted);
  DirectOperation next = write(kIova + 8, 8);
  next.psn = 101;
  ASSERT_EQ(execute(next), DirectResult::kExecuted);
  EXPECT_TRUE(sealed(*entry_, table_->seed()));
  EXPECT_EQ(entry_->expected_psn, 102u);
}

TEST_F(TargetTableTest, AReadFetchesIntoTheInitiatorsMemory) {
  memory_[200] = 0x42;
  DirectOperation op = write(kIova + 200, 1);
  op.kind = DirectKind::kRead;
  ASSERT_EQ(execute(op), DirectResult::kExecuted);
  EXPECT_EQ(source_[0], 0x42);
  EXPECT_EQ(entry_->expected_psn, 101u);
}

TEST_F(TargetTableTest, EveryCheckThatFailsLeavesAllAsItWasForThePackets) {
  const std::vector<std::pair<const char*, std::function<void(DirectOperation&)>>> cases = {
      {"another PSN", [](DirectOperation& op) { op.psn = 101; }},
      {"not the connected peer", [](DirectOperation& op) { op.initiator_key += 1; }},
      {"another QP", [](DirectOperation& op) { op.qpn = kTargetQpn + 1; }},
      {"another device", [](DirectOperation& op) { op.device_index = 1; }},
      {"an unknown R_Key", [](DirectOperation& op) { op.rkey = kRkey + 1; }},
      {"before the MR", [](DirectOperation& op) { op.va = kIova - 1; }},
      {"past the MR's end", [](DirectOperation& op) { op.va = kIova + 250; }},
      {"a length wrapping around",
       [](DirectOperation& op) { op.va = kIova + 8, op.length = UINT64_MAX - 4; }},
      {"the QP closed", [this](DirectOperation&) { change_qp([](auto& e) { e.open = 0; }); }},
      {"no remote write on the QP",
       [this](DirectOperation&) { change_qp([](auto& e) { e.access_flags = kAccessRemoteRead; }); }},
      {"the QP of another PD",
       [this](DirectOperation&) { change_qp([](auto& e) { e.pd = kPd + 1; }); }},
      {"the QP entry scribbled over",
       [this](DirectOperation&) { entry_->peer_key ^= 1 << 20; }},
      {"the MR entry scribbled over", [this](DirectOperation&) { mr_entry()->host_address += 64; }},
      {"the seed scribbled over", [this](DirectOperation&) { layout().header.seed ^= 1; }},
      {"the entry held elsewhere",
       [this](DirectOperation&) { std::atomic_ref<uint32_t>(entry_->lock).store(0x7ffffffe); }},
      {"not accepting", [this](DirectOperation&) { table_->set_accepting(false); }},
      {"the MR withdrawn", [this](DirectOperation&) { table_->withdraw_mr(kDevice, kRkey); }},
  };
  for (const auto& [what, spoil] : cases) {
    SCOPED_TRACE(what);
    SetUp();  // a fresh table and memory each time
    DirectOperation op = write(kIova, 16);
    spoil(op);
    EXPECT_EQ(execute(op), DirectResult::kNotHere);
    EXPECT_TRUE(memory_untouched());
    EXPECT_EQ(entry_->expected_psn, 100u);
    EXPECT_EQ(entry_->executed, 0u);
  }
}

TEST_F(TargetTableTest, AnMrWithoutRemoteWriteTakesNoWrite) {
  table_->withdraw_mr(kDevice, kRkey);
  table_->publish_mr(TargetMemory{kDevice, kRkey, kAccessRemoteRead, kPd, kIova, memory_.size(),
                                 reinterpret_cast<uint64_t>(memory_.data()), std::nullopt});
  EXPECT_EQ(execute(write(kIova, 16)), DirectResult::kNotHere);
  EXPECT_TRUE(memory_untouched());
}

TEST_F(TargetTableTest, AZeroLengthWriteNamesNoMemoryButTakesItsPsn) {
  DirectOperation op = write(0, 0);
  op.rkey = 0;
  ASSERT_EQ(execute(op), DirectResult::kExecuted);
  EXPECT_EQ(entry_->expected_psn, 101u);
}

TEST_F(TargetTableTest, MemoryThatIsNotThereIsNotHere) {
  table_->withdraw_mr(kDevice, kRkey);
  table_->publish_mr(TargetMemory{kDevice, kRkey, kAccessRemoteWrite, kPd, kIova, 4096, 8, std::nullopt});
  EXPECT_EQ(execute(write(kIova, 16)), DirectResult::kNotHere);
  EXPECT_EQ(entry_->expected_psn, 100u);
}

TEST_F(TargetTableTest, WithdrawingAnMrWaitsForTheOperationHoldingIt) {
  TargetMrEntry* held = mr_entry();
  ASSERT_NE(held, nullptr);
  ASSERT_TRUE(shared_lock_word::try_lock(held->lock));  // an operation in progress
  std::atomic<bool> withdrawn{false};
  std::thread owner([&] {
    table_->withdraw_mr(kDevice, kRkey);
    withdrawn = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(withdrawn.load());
  shared_lock_word::unlock(held->lock);
  owner.join();
  EXPECT_TRUE(withdrawn.load());
  EXPECT_EQ(execute(write(kIova, 16)), DirectResult::kNotHere);
}

// The tag a forked child holds locks with, written where its parent sees it.
uint32_t child_tag_then_exit(pid_t& child) {
  auto* tag = static_cast<std::atomic<uint32_t>*>(mmap(nullptr, sizeof(std::atomic<uint32_t>),
                                                       PROT_READ | PROT_WRITE,
                                                       MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (tag == MAP_FAILED) return 0;
  tag->store(0);
  child = fork();
  if (child == 0) {
    tag->store(shared_lock_word::self_tag());
    _exit(0);
  }
  siginfo_t exited{};
  waitid(P_PID, static_cast<id_t>(child), &exited, WEXITED | WNOWAIT);  // a zombie now
  const uint32_t value = tag->load();
  munmap(tag, sizeof(std::atomic<uint32_t>));
  return value;
}

TEST(SharedLockWord, ALockLeftByADeadProcessIsTakenOver) {
  pid_t child = 0;
  uint32_t word = child_tag_then_exit(child);
  ASSERT_NE(word, 0u);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  shared_lock_word::lock(word);
  EXPECT_EQ(word, shared_lock_word::self_tag());
  shared_lock_word::unlock(word);
  EXPECT_EQ(word, 0u);
}

// Killed and not reaped yet (a test that keeps its killed peer to look at,
// a parent slow to wait): the zombie answers kill() but holds nothing.
TEST(SharedLockWord, ALockLeftByAZombieIsTakenOver) {
  pid_t child = 0;
  uint32_t word = child_tag_then_exit(child);
  ASSERT_NE(word, 0u);
  shared_lock_word::lock(word);
  EXPECT_EQ(word, shared_lock_word::self_tag());
  shared_lock_word::unlock(word);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
}

// The kernel hands a dead holder's pid to a new process (pid_max is often
// 32768): that process, started at another time, does not hold the lock.
// Here the "new process" is this one, and the tag an older one's.
TEST(SharedLockWord, APidGivenToAnotherProcessSinceHoldsNothing) {
  const uint32_t mine = shared_lock_word::self_tag();
  if (mine >> 22 == 0) GTEST_SKIP() << "no /proc of this pid namespace: only the pid is known";
  uint32_t word = mine ^ (1u << 22);  // our pid, another start time
  shared_lock_word::lock(word);
  EXPECT_EQ(word, mine);
}

// Scribbled over by another process: 0xffffffff would be kill(-1, 0),
// which always answers, and the waiter waited for ever; pid 0 is no holder.
TEST(SharedLockWord, AWordHoldingNoPossiblePidIsTakenOver) {
  for (uint32_t garbage : {0xffffffffu, 0x80000000u, 0x00400000u}) {
    uint32_t word = garbage;
    shared_lock_word::lock(word);
    EXPECT_EQ(word, shared_lock_word::self_tag()) << std::hex << garbage;
  }
}

TEST(SharedLockWord, ALiveHoldersLockIsNotTaken) {
  uint32_t word = shared_lock_word::self_tag();  // another thread of ours holds it
  EXPECT_FALSE(shared_lock_word::try_lock(word, 1000));
  EXPECT_EQ(word, shared_lock_word::self_tag());
}

}  // namespace
}  // namespace softverbs
