// Room in /dev/shm: the slot count from the environment, the message for a
// /dev/shm without room, and segments created on a tmpfs too small for
// them (in a private mount namespace; needs root): they fail cleanly at
// creation, and what was created can be used whole without a SIGBUS.
#include "emulator/wire/shm_space.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "emulator/wire/mailbox_slots.h"
#include "emulator/wire/shm_mailbox.h"
#include "emulator/wire/shm_names.h"
#include "emulator/wire/shm_registry.h"
#include "emulator/wire/shm_wire.h"
#include "emulator/wire/wire_test_support.h"

namespace softverbs {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;
constexpr int kNoPrivateMount = 77;

TEST(MailboxSlots, PowersOfTwoWithinTheLimitsAreTaken) {
  for (uint32_t expected : {64u, 128u, 512u, 4096u, 8192u}) {
    uint32_t slots = 0;
    std::string problem;
    EXPECT_TRUE(parse_mailbox_slots(std::to_string(expected), slots, problem)) << expected;
    EXPECT_EQ(slots, expected);
  }
}

TEST(MailboxSlots, AnythingElseIsRefusedSayingWhatItMustBe) {
  for (const char* text : {"", "0", "32", "63", "100", "16384", "512k", "0x200", " 512",
                           "99999999999999999999999"}) {
    uint32_t slots = 7;
    std::string problem;
    EXPECT_FALSE(parse_mailbox_slots(text, slots, problem)) << text;
    EXPECT_EQ(slots, 7u) << text;
    EXPECT_NE(problem.find("power of two from 64 to 8192"), std::string::npos) << problem;
  }
}

TEST(ShmSpace, TheDefaultMailboxFitsSixteenProcessesInSixtyFourMebibytes) {
  EXPECT_LT(mailbox_segment_bytes(kDefaultMailboxSlots), 2.2 * kMiB);
  EXPECT_LE(shm_registry_bytes(), 2 * kMiB + 64 * 1024);
  EXPECT_LT(shm_registry_bytes() + 16 * mailbox_segment_bytes(kDefaultMailboxSlots), 40 * kMiB);
}

TEST(ShmSpace, TheShortageMessageSaysWhatIsMissingAndHowToMakeRoom) {
  const ShmSpace space{900 * 1024, kMiB};
  const std::string text = shm_shortage_message("registry", 2 * kMiB, &space);
  for (const char* part : {"no room in /dev/shm for the registry (2.0 MiB)",
                           "/dev/shm has 0.9 MiB free of 1.0 MiB", "each process needs",
                           "docker run --shm-size=", "mount -o remount,size=",
                           "SOFTVERBS_MAILBOX_SLOTS"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
  // When /dev/shm cannot be looked at, the rest is still said.
  const std::string without_space = shm_shortage_message("registry", 2 * kMiB, nullptr);
  EXPECT_EQ(without_space.find("free of"), std::string::npos);
  EXPECT_NE(without_space.find("docker run --shm-size="), std::string::npos);
}

// ---- On a /dev/shm of our own, too small.

class SmallDevShmTest : public ::testing::Test {
 protected:
  void TearDown() override { testing::remove_segments_of_current_prefix(); }

  // Runs `body` in a child that has a private tmpfs of `size` on /dev/shm.
  // Its exit code; a signal (SIGBUS) shows as 128 + signal.
  int run_with_dev_shm_of(const std::string& size, const std::function<int()>& body) {
    pid_t child = testing::fork_child([&] {
      if (unshare(CLONE_NEWNS) != 0) return kNoPrivateMount;
      if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return kNoPrivateMount;
      const std::string options = "size=" + size + ",mode=1777";
      if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
        return kNoPrivateMount;
      }
      return body();
    }, 120);
    return testing::wait_child(child);
  }

  testing::ScopedShmPrefix prefix_;
  testing::Watchdog watchdog_{300};
};

// What the body wrote to stderr.
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()), saved_(dup(2)) {
    std::fflush(stderr);
    if (file_ != nullptr) dup2(fileno(file_), 2);
  }
  ~StderrCapture() {
    restore();
    if (file_ != nullptr) std::fclose(file_);
  }
  std::string text() {
    restore();
    std::string captured;
    if (file_ == nullptr) return captured;
    std::rewind(file_);
    char buffer[4096];
    size_t n = 0;
    while ((n = std::fread(buffer, 1, sizeof(buffer), file_)) != 0) captured.append(buffer, n);
    return captured;
  }

 private:
  void restore() {
    std::fflush(stderr);
    if (saved_ >= 0) {
      dup2(saved_, 2);
      close(saved_);
      saved_ = -1;
    }
  }
  FILE* file_;
  int saved_;
};

TEST_F(SmallDevShmTest, MailboxesAreCreatedWholeOrNotAtAllAndNeverRaiseSigbus) {
  const int code = run_with_dev_shm_of("1m", [] {
    Errno err = 0;
    if (ShmMailbox::create(mailbox_segment_name(1, 1), kDefaultMailboxSlots, err) ||
        err != ENOSPC) {
      return 2;  // 2.1 MiB cannot fit in 1 MiB
    }
    if (!testing::segments_of_current_prefix().empty()) return 3;  // nothing left behind
    // Small ones until there is no room: each one that exists is usable to
    // its last byte.
    std::vector<std::unique_ptr<ShmMailbox>> created;
    for (uint32_t slot = 0; slot < 16; ++slot) {
      auto mailbox = ShmMailbox::create(mailbox_segment_name(slot, 1), kMinMailboxSlots, err);
      if (!mailbox) {
        if (err != ENOSPC) return 4;
        break;
      }
      testing::RawMailbox raw;
      if (!raw.open(mailbox_segment_name(slot, 1))) return 5;
      for (uint32_t i = 0; i < raw.slot_count(); ++i) {
        std::memset(raw.slot(i).bytes, 0xa5, kShmMaxFrameBytes);
      }
      created.push_back(std::move(mailbox));
    }
    return created.size() >= 2 && created.size() < 16 ? 0 : 6;
  });
  if (code == kNoPrivateMount) GTEST_SKIP() << "no private /dev/shm (needs root and unshare)";
  EXPECT_EQ(code, 0);
}

TEST_F(SmallDevShmTest, ARegistryWithoutRoomFailsAttachWithEnospcAndSaysHowToMakeRoom) {
  const int code = run_with_dev_shm_of("1m", [] {
    StderrCapture capture;
    Errno err = 0;
    const bool attached = ShmRegistry::attach(err) != nullptr;
    const std::string text = capture.text();
    if (attached || err != ENOSPC) return 2;
    if (text.find("no room in /dev/shm for the registry") == std::string::npos ||
        text.find("/dev/shm has") == std::string::npos ||
        text.find("--shm-size=") == std::string::npos) {
      std::fprintf(stderr, "message was: %s\n", text.c_str());
      return 3;
    }
    return testing::segments_of_current_prefix().empty() ? 0 : 4;
  });
  if (code == kNoPrivateMount) GTEST_SKIP() << "no private /dev/shm (needs root and unshare)";
  EXPECT_EQ(code, 0);
}

TEST_F(SmallDevShmTest, AMailboxWithoutRoomFailsTheWireWithEnospcAndSaysHowToMakeRoom) {
  const int code = run_with_dev_shm_of("3m", [] {  // the registry fits, its mailbox not
    Errno err = 0;
    auto registry = ShmRegistry::attach(err);
    if (!registry) return 2;
    StderrCapture capture;
    const bool created = ShmWire::create(*registry, err) != nullptr;
    const std::string text = capture.text();
    if (created || err != ENOSPC) return 3;
    if (text.find("no room in /dev/shm for the mailbox of this process") == std::string::npos) {
      std::fprintf(stderr, "message was: %s\n", text.c_str());
      return 4;
    }
    // A smaller mailbox fits.
    return ShmWire::create(*registry, kMinMailboxSlots, err) ? 0 : 5;
  });
  if (code == kNoPrivateMount) GTEST_SKIP() << "no private /dev/shm (needs root and unshare)";
  EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace softverbs
