// The HCA's accesses to application memory end in `false`, not a signal,
// when the memory is gone; every other fault is the program's own, as it
// would be without softverbs.
#include "emulator/memory/app_memory.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "emulator/memory/address_space.h"

namespace softverbs {
namespace {

class AppMemory : public ::testing::TestWithParam<app_memory::Mode> {
 protected:
  void SetUp() override {
    saved_ = app_memory::mode();
    app_memory::set_mode(GetParam());
    if (app_memory::mode() != GetParam()) GTEST_SKIP() << "this build copies by system calls only";
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  }
  void TearDown() override { app_memory::set_mode(saved_); }

  // Two pages, the second unmapped: an MR whose tail the program gave back.
  uint8_t* half_unmapped() {
    void* p = mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    auto* bytes = static_cast<uint8_t*>(p);
    munmap(bytes + page_, page_);
    mapped_.push_back(bytes);
    return bytes;
  }
  ~AppMemory() override {
    for (uint8_t* p : mapped_) munmap(p, page_);
  }

  app_memory::Mode saved_{};
  size_t page_ = 4096;
  std::vector<uint8_t*> mapped_;
};

TEST_P(AppMemory, CopiesWithinMappedMemory) {
  uint8_t* m = half_unmapped();
  const char text[] = "placed by the HCA";
  ASSERT_TRUE(app_memory::write(m + 10, text, sizeof(text)));
  char back[sizeof(text)] = {};
  ASSERT_TRUE(app_memory::read(back, m + 10, sizeof(text)));
  EXPECT_STREQ(back, text);
}

TEST_P(AppMemory, CopyIntoUnmappedMemoryFailsWithoutASignal) {
  uint8_t* m = half_unmapped();
  std::vector<uint8_t> data(256, 0xab);
  EXPECT_FALSE(app_memory::write(m + page_ - 128, data.data(), data.size()));
  EXPECT_FALSE(app_memory::read(data.data(), m + page_, data.size()));
  EXPECT_FALSE(app_memory::write(nullptr, data.data(), 8));
  // The thread carries on, and so do later accesses.
  EXPECT_TRUE(app_memory::write(m, data.data(), 64));
}

TEST_P(AppMemory, CopyBetweenTwoPlacesFailsWhenEitherIsUnmapped) {
  uint8_t* from = half_unmapped();
  uint8_t* to = half_unmapped();
  std::memset(from, 0x5a, 64);
  ASSERT_TRUE(app_memory::copy(to + 100, from, 64));
  EXPECT_EQ(to[100], 0x5a);
  EXPECT_EQ(to[163], 0x5a);
  // The source runs into its unmapped page, then the destination does.
  EXPECT_FALSE(app_memory::copy(to, from + page_ - 32, 64));
  EXPECT_FALSE(app_memory::copy(to + page_ - 32, from, 64));
  EXPECT_FALSE(app_memory::copy(to, nullptr, 8));
  // Overlapping ranges, as a WRITE within one MR may name them.
  for (int i = 0; i < 64; ++i) from[i] = static_cast<uint8_t>(i);
  ASSERT_TRUE(app_memory::copy(from + 8, from, 32));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(from[8 + i], i) << i;
}

TEST_P(AppMemory, WriteIntoReadOnlyMemoryFails) {
  uint8_t* m = half_unmapped();
  ASSERT_EQ(mprotect(m, page_, PROT_READ), 0);
  const uint64_t v = 1;
  EXPECT_FALSE(app_memory::write(m, &v, sizeof(v)));
  uint64_t out = 0;
  EXPECT_TRUE(app_memory::read(&out, m, sizeof(out)));
}

TEST_P(AppMemory, AtomicsOnMappedAndUnmappedWords) {
  uint8_t* m = half_unmapped();
  auto* word = reinterpret_cast<uint64_t*>(m);
  *word = 40;
  uint64_t original = 0;
  ASSERT_TRUE(app_memory::fetch_add(word, 2, original));
  EXPECT_EQ(original, 40u);
  ASSERT_TRUE(app_memory::compare_swap(word, 42, 7, original));
  EXPECT_EQ(original, 42u);
  EXPECT_EQ(*word, 7u);
  auto* gone = reinterpret_cast<uint64_t*>(m + page_);
  EXPECT_FALSE(app_memory::fetch_add(gone, 1, original));
  EXPECT_FALSE(app_memory::compare_swap(gone, 0, 1, original));
}

TEST_P(AppMemory, PopulateReportsUnmappedRanges) {
  uint8_t* m = half_unmapped();
  EXPECT_TRUE(app_memory::populate(m, page_, true));
  EXPECT_FALSE(app_memory::populate(m, 2 * page_, false));
}

INSTANTIATE_TEST_SUITE_P(BothWays, AppMemory,
                         ::testing::Values(app_memory::Mode::kGuarded,
                                           app_memory::Mode::kSyscall),
                         [](const auto& info) {
                           return info.param == app_memory::Mode::kGuarded ? "Guarded"
                                                                           : "Syscall";
                         });

// An address no mapping holds (not null: a store through null is undefined
// behaviour, which UBSan reports before any fault).
volatile uint8_t* unmapped_address() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  munmap(p, page);
  return static_cast<volatile uint8_t*>(p);
}

// A fault of the program's own, outside any HCA access, still ends it with
// SIGSEGV, once the guard is in place. (Under ASan or TSan their own
// handler ends it instead: what the program would do without the guard.)
TEST(AppMemoryGuard, ProgramFaultsStillKillWithSigsegv) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's SIGSEGV handler reports the fault and exits";
#endif
  app_memory::set_mode(app_memory::Mode::kGuarded);
  uint64_t v = 0;
  ASSERT_TRUE(app_memory::read(&v, &v, sizeof(v)));
  EXPECT_EXIT(*unmapped_address() = 1, ::testing::KilledBySignal(SIGSEGV), "");
}

// A handler the program installed before the guard still gets its faults.
// (The child runs the test again from the start, so the guard is installed
// there after the program's handler.)
TEST(AppMemoryGuard, ProgramHandlerInstalledBeforeStillRuns) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        struct sigaction action {};
        action.sa_handler = [](int) { _exit(42); };
        sigaction(SIGSEGV, &action, nullptr);
        uint64_t word = 0;
        app_memory::read(&word, &word, sizeof(word));
        *unmapped_address() = 1;
      },
      ::testing::ExitedWithCode(42), "");
}

// The program's handler runs right above the signal frame, as if the guard
// were not there: what called it is the C library's signal return, not
// softverbs (whose frames would otherwise open the backtrace a crash
// handler prints). Exit 42 when so, 43 when called from elsewhere.
TEST(AppMemoryGuard, ProgramHandlerIsCalledFromTheSignalFrameNotFromTheGuard) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || !defined(__OPTIMIZE__)
  GTEST_SKIP() << "the sanitizers wrap handlers, and without optimization the call is no jump";
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        struct sigaction action {};
        action.sa_flags = SA_SIGINFO;
        action.sa_sigaction = [](int, siginfo_t*, void*) {
          Dl_info caller{};
          const bool from_libc = dladdr(__builtin_return_address(0), &caller) != 0 &&
                                 caller.dli_fname && std::strstr(caller.dli_fname, "libc.so");
          _exit(from_libc ? 42 : 43);
        };
        sigaction(SIGSEGV, &action, nullptr);
        uint64_t word = 0;
        app_memory::read(&word, &word, sizeof(word));  // installs the guard after it
        *unmapped_address() = 1;
      },
      ::testing::ExitedWithCode(42), "");
}

TEST(AddressSpace, MappedRangesAndTheirAccess) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const auto base = reinterpret_cast<uint64_t>(p);
  ASSERT_EQ(mprotect(static_cast<uint8_t*>(p) + page, page, PROT_READ), 0);
  EXPECT_TRUE(range_is_mapped(base, 3 * page, false));
  EXPECT_FALSE(range_is_mapped(base, 3 * page, true));
  EXPECT_TRUE(range_is_mapped(base, page, true));
  munmap(static_cast<uint8_t*>(p) + 2 * page, page);
  EXPECT_FALSE(range_is_mapped(base, 3 * page, false));
  EXPECT_FALSE(range_is_mapped(0, 8, false));
  munmap(p, 2 * page);
}

}  // namespace
}  // namespace softverbs
