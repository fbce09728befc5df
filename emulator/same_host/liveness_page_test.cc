// A process's liveness page (liveness_page.h) as its peers read it: alive
// while a thread holds its mutex, dead once the kernel has found that
// thread's process killed; mapped read-only by a peer (peer_pages.h).
#include "emulator/same_host/liveness_page.h"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <csignal>

#include "emulator/same_host/peer_pages.h"

namespace softverbs {
namespace {

// Forks a child that holds `page` and then waits to be killed; returns its pid.
pid_t child_holding(LivenessPage& page) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    page.hold();
    (void)!write(ready[1], "x", 1);
    for (;;) pause();
  }
  char c = 0;
  const bool held = child > 0 && read(ready[0], &c, 1) == 1;
  close(ready[0]);
  close(ready[1]);
  return held ? child : -1;
}

// The page as a peer maps it: read-only, by descriptor and inode.
std::shared_ptr<const PeerMapping> as_a_peer_maps(const LivenessPage& page) {
  return PeerPages::process().find(static_cast<uint32_t>(getpid()), page.fd(), page.inode(),
                                   PeerFile::kLiveness);
}

TEST(LivenessPage, AHolderIsAliveUntilItsProcessIsKilled) {
  LivenessPage page;
  ASSERT_TRUE(page.valid());
  std::shared_ptr<const PeerMapping> seen = as_a_peer_maps(page);
  ASSERT_TRUE(seen);
  EXPECT_FALSE(holder_alive(seen->base)) << "nobody holds it yet";
  const pid_t child = child_holding(page);
  ASSERT_GT(child, 0);
  EXPECT_TRUE(holder_alive(seen->base));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  siginfo_t died{};
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(child), &died, WEXITED), 0);
  EXPECT_FALSE(holder_alive(seen->base)) << "the kernel did not mark the dead holder";
}

TEST(LivenessPage, AHolderThatLetsGoIsNotAlive) {
  LivenessPage page;
  ASSERT_TRUE(page.valid());
  std::shared_ptr<const PeerMapping> seen = as_a_peer_maps(page);
  ASSERT_TRUE(seen);
  page.hold();
  EXPECT_TRUE(holder_alive(seen->base));
  page.release();
  EXPECT_FALSE(holder_alive(seen->base));
}

// A file of another kind under the liveness page's name is not mapped as it.
TEST(LivenessPage, APeerMapsOnlyALivenessPageAsOne) {
  LivenessPage page;
  ASSERT_TRUE(page.valid());
  const auto self = static_cast<uint32_t>(getpid());
  EXPECT_FALSE(PeerPages::process().find(self, page.fd(), page.inode(), PeerFile::kMrPages));
  EXPECT_FALSE(PeerPages::process().find(self, page.fd(), page.inode() + 1, PeerFile::kLiveness));
}

}  // namespace
}  // namespace softverbs
