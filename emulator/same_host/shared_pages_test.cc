// Registered memory moved onto a shared file (shared_pages.h) and a peer's
// view of it (peer_pages.h): the bytes and addresses stay, what may not be
// moved is not, and another process's copy reaches exactly these pages.
#include "emulator/same_host/shared_pages.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <cstdio>
#include <cstring>
#include <vector>

#include "emulator/memory/address_space.h"
#include "emulator/memory/page_move.h"
#include "emulator/same_host/peer_pages.h"

namespace softverbs {
namespace {

const uint64_t kPage = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));

// Anonymous private pages filled with a pattern.
class SharedPagesTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kPages = 4;
  void SetUp() override {
    void* p = mmap(nullptr, kPages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    base_ = static_cast<uint8_t*>(p);
    for (uint64_t i = 0; i < kPages * kPage; ++i) base_[i] = static_cast<uint8_t>(i * 7 + 1);
  }
  void TearDown() override { munmap(base_, kPages * kPage); }

  uint64_t at(uint64_t offset) const { return reinterpret_cast<uint64_t>(base_) + offset; }
  bool pattern_intact() const {
    for (uint64_t i = 0; i < kPages * kPage; ++i)
      if (base_[i] != static_cast<uint8_t>(i * 7 + 1)) return false;
    return true;
  }
  // The file mapping over `offset`, as /proc/self/maps shows it.
  MappedRange mapping_at(uint64_t offset) const {
    std::vector<MappedRange> m = mappings_over(at(offset), 1);
    return m.empty() ? MappedRange{} : m[0];
  }

  SharedPages pages_;
  uint8_t* base_ = nullptr;
};

TEST_F(SharedPagesTest, AnonymousPagesMoveOntoAFileInPlaceWithTheirBytes) {
  std::optional<SharedPagesRef> ref = pages_.share(at(kPage), 2 * kPage);
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->offset, 0u);
  EXPECT_TRUE(pattern_intact());
  const MappedRange m = mapping_at(kPage);
  EXPECT_TRUE(m.shared);
  EXPECT_EQ(m.inode, ref->inode);
  EXPECT_EQ(m.begin, at(kPage));
  EXPECT_EQ(m.end, at(3 * kPage));
  EXPECT_EQ(m.path.rfind("/memfd:softverbs-mr", 0), 0u) << m.path;
  // The pages around the range stayed as they were.
  EXPECT_FALSE(mapping_at(0).shared);
  EXPECT_FALSE(mapping_at(3 * kPage).shared);

  // Another mapping of the file sees the application's writes, and the
  // application sees the other mapping's: the same pages.
  void* other = mmap(nullptr, 2 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, ref->fd, 0);
  ASSERT_NE(other, MAP_FAILED);
  auto* view = static_cast<uint8_t*>(other);
  base_[kPage + 200] = 0xab;
  EXPECT_EQ(view[200], 0xab);
  view[kPage + 5] = 0xcd;
  EXPECT_EQ(base_[2 * kPage + 5], 0xcd);
  munmap(other, 2 * kPage);
  pages_.release(*ref);
}

TEST_F(SharedPagesTest, AnMrThatDoesNotBeginAndEndOnPageBoundariesStaysAsItIs) {
  EXPECT_FALSE(pages_.share(at(100), kPage));
  EXPECT_FALSE(pages_.share(at(0), kPage + 1));
  EXPECT_FALSE(mapping_at(0).shared);
}

TEST_F(SharedPagesTest, AnMrInsideSharedPagesTakesTheSameFileAndTheLastReleaseClosesIt) {
  std::optional<SharedPagesRef> outer = pages_.share(at(0), 3 * kPage);
  ASSERT_TRUE(outer);
  std::optional<SharedPagesRef> inner = pages_.share(at(kPage + 10), 64);
  ASSERT_TRUE(inner);
  EXPECT_EQ(inner->inode, outer->inode);
  EXPECT_EQ(inner->fd, outer->fd);
  EXPECT_EQ(inner->offset, kPage + 10);
  pages_.release(*outer);
  EXPECT_NE(fcntl(inner->fd, F_GETFD), -1) << "closed while an MR still names it";
  pages_.release(*inner);
  EXPECT_EQ(fcntl(inner->fd, F_GETFD), -1);
  // The pages are private again, with their bytes.
  EXPECT_FALSE(mapping_at(0).shared);
  EXPECT_FALSE(mapping_at(2 * kPage).shared);
  EXPECT_TRUE(pattern_intact());
  // A new registration moves them onto a new file.
  std::optional<SharedPagesRef> again = pages_.share(at(0), kPage);
  ASSERT_TRUE(again);
  EXPECT_NE(again->inode, outer->inode);
  EXPECT_TRUE(pattern_intact());
  pages_.release(*again);
}

// join() takes only pages already shared: a registration that must not
// copy (deferred_sharing.h) moves nothing.
TEST_F(SharedPagesTest, JoinTakesPagesAlreadySharedAndMovesNoOthers) {
  EXPECT_FALSE(pages_.join(at(0), 2 * kPage));
  EXPECT_FALSE(mapping_at(0).shared) << "join() moved pages";
  std::optional<SharedPagesRef> outer = pages_.share(at(0), 2 * kPage);
  ASSERT_TRUE(outer);
  std::optional<SharedPagesRef> inner = pages_.join(at(kPage), kPage);
  ASSERT_TRUE(inner);
  EXPECT_EQ(inner->inode, outer->inode);
  EXPECT_EQ(inner->offset, kPage);
  // Beyond the file: nothing, and the pages past it stay private.
  EXPECT_FALSE(pages_.join(at(kPage), 2 * kPage));
  EXPECT_FALSE(mapping_at(2 * kPage).shared);
  pages_.release(*inner);
  pages_.release(*outer);
  EXPECT_TRUE(pattern_intact());
}

// Memory freed after deregistration is reused for anything (the heap's
// next objects): a child of fork() must have it.
TEST_F(SharedPagesTest, AfterTheLastReleaseAChildOfForkHasThePagesAgain) {
  std::optional<SharedPagesRef> ref = pages_.share(at(0), 2 * kPage);
  ASSERT_TRUE(ref);
  pages_.release(*ref);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const bool ok = pattern_intact();
    std::memset(base_, 0x77, 2 * kPage);  // its own copy
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child did not have the pages, or not their bytes";
  EXPECT_TRUE(pattern_intact()) << "the child's writes reached the parent";
}

TEST_F(SharedPagesTest, PagesThatAnMrSharesAreNotMovedFromUnderIt) {
  std::optional<SharedPagesRef> first = pages_.share(at(0), 2 * kPage);
  ASSERT_TRUE(first);
  // Overlapping the first file without lying inside it.
  EXPECT_FALSE(pages_.share(at(kPage), 2 * kPage));
  EXPECT_EQ(mapping_at(kPage).inode, first->inode);
  EXPECT_FALSE(mapping_at(2 * kPage).shared);
  pages_.release(*first);
}

TEST_F(SharedPagesTest, ReadOnlyFileBackedAndUnmappedMemoryStayAsTheyAre) {
  ASSERT_EQ(mprotect(base_, kPage, PROT_READ), 0);
  EXPECT_FALSE(pages_.share(at(0), kPage));
  ASSERT_EQ(munmap(base_ + 3 * kPage, kPage), 0);
  EXPECT_FALSE(pages_.share(at(2 * kPage), 2 * kPage));

  FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(ftruncate(fileno(file), static_cast<off_t>(kPage)), 0);
  void* mapped = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fileno(file), 0);
  ASSERT_NE(mapped, MAP_FAILED);
  EXPECT_FALSE(pages_.share(reinterpret_cast<uint64_t>(mapped), kPage));
  munmap(mapped, kPage);
  std::fclose(file);

  uint8_t on_the_stack[64] = {};
  EXPECT_FALSE(pages_.share(reinterpret_cast<uint64_t>(on_the_stack), sizeof(on_the_stack)));
}

// As Linux gives a child pinned pages (5.13 on): its own copy, of the
// bytes at the fork; the parent's writes after it are not the child's, nor
// the child's the parent's.
TEST_F(SharedPagesTest, AChildOfForkHasItsOwnCopyOfThePagesAsTheyWereAtTheFork) {
  std::optional<SharedPagesRef> ref = pages_.share(at(0), 2 * kPage);
  ASSERT_TRUE(ref);
  base_[10] = 0x5a;
  int parent_wrote[2];
  ASSERT_EQ(pipe(parent_wrote), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c;
    if (read(parent_wrote[0], &c, 1) != 1) _exit(2);
    if (base_[10] != 0x5a || base_[11] != static_cast<uint8_t>(11 * 7 + 1)) _exit(3);
    if (mapping_at(0).shared || mapping_at(kPage).shared) _exit(4);
    std::memset(base_, 0x77, 2 * kPage);
    _exit(0);
  }
  base_[10] = 0x6b;  // after the fork: the parent's alone
  ref->view[20] = 0x6c;
  ASSERT_EQ(write(parent_wrote[1], "w", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: no word; 3: not the bytes of the fork; 4: still shared";
  EXPECT_EQ(base_[10], 0x6b);
  EXPECT_EQ(base_[20], 0x6c) << "the emulator's mapping is not the program's pages";
  EXPECT_EQ(base_[kPage], static_cast<uint8_t>(kPage * 7 + 1))
      << "the child's writes reached the parent";
  EXPECT_TRUE(mapping_at(0).shared);
  close(parent_wrote[0]);
  close(parent_wrote[1]);
  pages_.release(*ref);
}

// Pinned pages stay the MR's when the program unmaps them: the emulator
// reaches them through its own mapping, never a later one at that address.
TEST_F(SharedPagesTest, TheEmulatorsMappingStaysOnTheRegisteredPagesWhenTheProgramMapsAnew) {
  std::optional<SharedPagesRef> ref = pages_.share(at(0), 2 * kPage);
  ASSERT_TRUE(ref);
  ASSERT_EQ(munmap(base_, 2 * kPage), 0);
  void* anew = mmap(base_, 2 * kPage, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(anew, static_cast<void*>(base_));
  std::memset(ref->view, 0x33, 2 * kPage);
  for (uint64_t i = 0; i < 2 * kPage; ++i) ASSERT_EQ(base_[i], 0) << "at " << i;
  pages_.release(*ref);
  // The new mapping is not the file's, so it stays as the program made it.
  EXPECT_FALSE(mapping_at(0).shared);
  EXPECT_EQ(base_[0], 0);
}

// Another thread writes into the pages all along while they move onto the
// file and back, a thousand times: each write lands (page_move.h).
TEST_F(SharedPagesTest, NoWriteOfAnotherThreadIsLostWhileThePagesMove) {
  const uint64_t kWords = 2 * kPage / sizeof(uint64_t);
  auto* words = reinterpret_cast<volatile uint64_t*>(base_);
  std::atomic<bool> stop{false};
  uint64_t last_round = 0, last_word = 0;
  std::thread writer([&] {
    for (uint64_t round = 1;; ++round)
      for (uint64_t w = 0; w < kWords; ++w) {
        words[w] = round;
        if ((w & 63) == 0 && stop.load(std::memory_order_relaxed)) {
          last_round = round;
          last_word = w;
          return;
        }
      }
  });
  const uint64_t held_before = page_move::writes_held();
  for (int i = 0; i < 1000; ++i) {
    std::optional<SharedPagesRef> ref = pages_.share(at(0), 2 * kPage);
    ASSERT_TRUE(ref) << "move " << i;
    pages_.release(*ref);
  }
  stop = true;
  writer.join();
  // Words before the one it stopped at have its last round, the rest the round before.
  for (uint64_t w = 0; w < kWords; ++w)
    ASSERT_EQ(words[w], w <= last_word ? last_round : last_round - 1) << "word " << w << " lost";
  EXPECT_GT(page_move::writes_held(), held_before) << "no write ever met a move: nothing was shown";
}

// Each file holds one of the program's descriptors: past a quarter of its
// limit, new MRs keep their pages.
TEST_F(SharedPagesTest, PastAQuarterOfTheDescriptorLimitPagesAreNotShared) {
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  rlimit low = before;
  low.rlim_cur = 16;  // four files
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<SharedPagesRef> refs;
  for (uint64_t i = 0; i < kPages; ++i) {
    std::optional<SharedPagesRef> ref = pages_.share(at(i * kPage), kPage);
    ASSERT_TRUE(ref) << "page " << i;
    refs.push_back(*ref);
  }
  void* more = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(more, MAP_FAILED);
  EXPECT_FALSE(pages_.share(reinterpret_cast<uint64_t>(more), kPage));
  // Inside pages already shared needs no new file.
  std::optional<SharedPagesRef> inside = pages_.share(at(10), 64);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
  ASSERT_TRUE(inside);
  refs.push_back(*inside);
  for (const SharedPagesRef& ref : refs) pages_.release(ref);
  munmap(more, kPage);
  EXPECT_TRUE(pattern_intact());
}

// The other side: a process maps what this one shares, by its descriptor
// and inode, and its copies land in this process's pages.
TEST_F(SharedPagesTest, AnotherProcessMapsThePagesByDescriptorAndInode) {
  std::optional<SharedPagesRef> ref = pages_.share(at(0), 2 * kPage);
  ASSERT_TRUE(ref);
  const uint32_t owner = static_cast<uint32_t>(getpid());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PeerPages& peer = PeerPages::process();
    // Another inode under that descriptor: not that file, so not mapped.
    if (peer.find(owner, ref->fd, ref->inode + 1)) _exit(2);
    std::shared_ptr<const PeerMapping> m = peer.find(owner, ref->fd, ref->inode);
    if (!m || m->size != 2 * kPage) _exit(3);
    std::memset(m->base + kPage, 0x42, 16);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (uint64_t i = 0; i < 16; ++i) EXPECT_EQ(base_[kPage + i], 0x42);
  EXPECT_EQ(base_[kPage + 16], static_cast<uint8_t>((kPage + 16) * 7 + 1));
  pages_.release(*ref);
}

// Whether this process maps a file named like the MR pages files.
bool maps_shared_mr_pages() {
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return false;
  char line[512];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, maps)) found = std::strstr(line, "softverbs-mr") != nullptr;
  std::fclose(maps);
  return found;
}

// A peer's mapping keeps the pages alive: once their owner lets go of them
// (its last MR over them deregistered), so does the peer, and the memory
// is given back.
TEST_F(SharedPagesTest, APeerLetsGoOfPagesTheirOwnerReleased) {
  std::optional<SharedPagesRef> ref = pages_.share(at(0), 2 * kPage);
  ASSERT_TRUE(ref);
  const uint32_t owner = static_cast<uint32_t>(getpid());
  int mapped[2], released[2];
  ASSERT_EQ(pipe(mapped), 0);
  ASSERT_EQ(pipe(released), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    PeerPages& peer = PeerPages::process();
    char c = 0;
    {
      std::shared_ptr<const PeerMapping> m = peer.find(owner, ref->fd, ref->inode);
      if (!m) _exit(2);
    }
    // The owner still holds the file: the mapping stays.
    if (peer.let_go_of_released() != 0 || !maps_shared_mr_pages()) _exit(3);
    if (write(mapped[1], "m", 1) != 1 || read(released[0], &c, 1) != 1) _exit(4);
    if (peer.let_go_of_released() != 1 || peer.held() != 0) _exit(5);
    if (maps_shared_mr_pages()) _exit(6);
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(mapped[0], &c, 1), 1);
  pages_.release(*ref);
  ASSERT_EQ(write(released[1], "r", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (int fd : {mapped[0], mapped[1], released[0], released[1]}) close(fd);
}

// The same when the owner is gone: its pages outlive it only as long as a
// peer maps them.
TEST_F(SharedPagesTest, APeerLetsGoOfPagesOfAnOwnerThatDied) {
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t owner = fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    std::optional<SharedPagesRef> ref = pages_.share(at(0), 2 * kPage);
    if (!ref) _exit(2);
    if (write(report[1], &*ref, sizeof *ref) != sizeof *ref) _exit(3);
    pause();  // until killed
    _exit(0);
  }
  // Killed however the test ends.
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid > 0 && kill(pid, SIGKILL) == 0) waitpid(pid, nullptr, 0);
    }
  } reaper{owner};
  SharedPagesRef ref;
  ASSERT_EQ(read(report[0], &ref, sizeof ref), static_cast<ssize_t>(sizeof ref));
  PeerPages& peer = PeerPages::process();
  // The mapping is process-wide: earlier tests of this program may have
  // left released pages in it, which are not this test's to count.
  peer.let_go_of_released();
  const size_t held_before = peer.held();
  {
    std::shared_ptr<const PeerMapping> m = peer.find(static_cast<uint32_t>(owner), ref.fd, ref.inode);
    ASSERT_TRUE(m) << "this process may not take another's descriptors here";
  }
  EXPECT_EQ(peer.held(), held_before + 1);
  EXPECT_EQ(peer.let_go_of_released(), 0u);
  kill(owner, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(owner, &status, 0), owner);
  reaper.pid = 0;
  EXPECT_EQ(peer.let_go_of_released(), 1u);
  EXPECT_FALSE(maps_shared_mr_pages());
  close(report[0]);
  close(report[1]);
}

}  // namespace
}  // namespace softverbs
