// A lock word in shared memory: taken, released, taken over from a holder
// that is gone or from garbage that names no process.
#include "emulator/sync/shared_lock_word.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

namespace softverbs::shared_lock_word {
namespace {

TEST(SharedLockWord, TakenAndReleased) {
  uint32_t word = 0;
  EXPECT_TRUE(try_lock(word));
  EXPECT_EQ(word, self_tag());
  EXPECT_FALSE(try_lock(word));
  unlock(word);
  EXPECT_EQ(word, 0u);
}

TEST(SharedLockWord, ADeadHoldersWordIsTakenOver) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  uint32_t word = static_cast<uint32_t>(child);  // it held the lock when it died
  lock(word);
  EXPECT_EQ(word, self_tag());
}

// Scribbled over: 0xffffffff would be kill(-1, 0), which always answers,
// and the waiter waited for ever.
TEST(SharedLockWord, AWordHoldingNoPossiblePidIsTakenOver) {
  for (uint32_t garbage : {0xffffffffu, 0x80000000u, 0x00400001u}) {
    uint32_t word = garbage;
    lock(word);
    EXPECT_EQ(word, self_tag()) << std::hex << garbage;
  }
}

}  // namespace
}  // namespace softverbs::shared_lock_word
