// The fault side of a page move (page_move.h): a write that faulted on
// pages being moved runs again once they are in place, and a fault that is
// the program's own is not taken for one, however many moves went over
// its address before.
#include "emulator/memory/page_move.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>

#include "emulator/memory/app_memory.h"

namespace softverbs {
namespace {

class PageMove : public ::testing::Test {
 protected:
  void SetUp() override {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    pages_ = static_cast<uint8_t*>(p);
  }
  void TearDown() override { munmap(pages_, page_); }
  // A move of the page that ends with the old page left in place.
  void move_once() {
    const auto begin = reinterpret_cast<uint64_t>(pages_);
    ASSERT_TRUE(page_move::start(begin, begin + page_));
    page_move::finish(PROT_READ | PROT_WRITE);
  }
  size_t page_ = 0;
  uint8_t* pages_ = nullptr;
};

// Moved onto a file at registration and back at deregistration: two moves
// over one range. A fault there afterwards may be a write that met the
// last move late, retried once; the same fault again is the program's.
TEST_F(PageMove, AFaultAfterTwoMovesOfItsRangeIsRetriedOnceThenIsTheProgramsOwn) {
  move_once();
  move_once();
  const auto address = reinterpret_cast<uintptr_t>(pages_ + 8);
  EXPECT_TRUE(page_move::waited_for(address)) << "a write that met the last move late";
  EXPECT_FALSE(page_move::waited_for(address)) << "the same fault again";
  EXPECT_FALSE(page_move::waited_for(address));
  // A later move over it: once more.
  move_once();
  EXPECT_TRUE(page_move::waited_for(address));
  EXPECT_FALSE(page_move::waited_for(address));
}

// What the retries were for in the end: an access of the HCA's to pages the
// program protected after such moves fails instead of faulting for ever
// (in a child, which an alarm ends should it loop).
TEST_F(PageMove, AGuardedCopyIntoPagesMovedTwiceAndThenProtectedFails) {
  app_memory::catch_faults();
  move_once();
  move_once();
  ASSERT_EQ(0, mprotect(pages_, page_, PROT_NONE));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(10);
    const uint8_t bytes[64] = {1};
    _exit(app_memory::write(pages_, bytes, sizeof bytes) ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(child, waitpid(child, &status, 0));
  ASSERT_TRUE(WIFEXITED(status)) << "the copy faulted for ever (killed by signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << ")";
  EXPECT_EQ(0, WEXITSTATUS(status)) << "the copy into protected pages reported success";
}

}  // namespace
}  // namespace softverbs
