// The APM state machine's rules for what software may ask (IBTA 17.2.8).
#include "emulator/transport/path_migration.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace softverbs {
namespace {

constexpr uint8_t kAskMigrated = 0, kAskRearm = 1, kAskArmed = 2;

Errno ask(MigrationState current, uint8_t requested, QpState next, bool loaded,
          bool* migrate = nullptr) {
  bool m = false;
  const Errno e = check_migration_request(current, requested, next, loaded, m);
  if (migrate) *migrate = m;
  return e;
}

TEST(MigrationRequest, OnlyTheChannelAdapterArms) {
  for (MigrationState s : {MigrationState::kMigrated, MigrationState::kRearm,
                           MigrationState::kArmed})
    EXPECT_EQ(EINVAL, ask(s, kAskArmed, QpState::kRts, true));
}

TEST(MigrationRequest, RearmNeedsRtsAnAlternatePathAndNoArmedState) {
  EXPECT_EQ(0, ask(MigrationState::kMigrated, kAskRearm, QpState::kRts, true));
  EXPECT_EQ(0, ask(MigrationState::kRearm, kAskRearm, QpState::kRts, true));
  EXPECT_EQ(EINVAL, ask(MigrationState::kMigrated, kAskRearm, QpState::kRts, false));
  EXPECT_EQ(EINVAL, ask(MigrationState::kMigrated, kAskRearm, QpState::kSqd, true));
  EXPECT_EQ(EINVAL, ask(MigrationState::kArmed, kAskRearm, QpState::kRts, true));
}

TEST(MigrationRequest, MigratedFromArmedIsAMigrationInRtsOrSqd) {
  bool migrate = false;
  EXPECT_EQ(0, ask(MigrationState::kArmed, kAskMigrated, QpState::kRts, true, &migrate));
  EXPECT_TRUE(migrate);
  EXPECT_EQ(0, ask(MigrationState::kArmed, kAskMigrated, QpState::kSqd, true, &migrate));
  EXPECT_TRUE(migrate);
  EXPECT_EQ(0, ask(MigrationState::kMigrated, kAskMigrated, QpState::kRts, false, &migrate));
  EXPECT_FALSE(migrate) << "already migrated: nothing to do";
  EXPECT_EQ(EINVAL, ask(MigrationState::kRearm, kAskMigrated, QpState::kRts, true));
  EXPECT_EQ(EINVAL, ask(MigrationState::kArmed, kAskMigrated, QpState::kRtr, true));
}

TEST(MigrationRequest, UnknownStatesAreRefused) {
  EXPECT_EQ(EINVAL, ask(MigrationState::kMigrated, 3, QpState::kRts, true));
}

}  // namespace
}  // namespace softverbs
