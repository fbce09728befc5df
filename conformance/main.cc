// Entry point of the conformance suite: picks the device under test from
// --device=NAME or SOFTVERBS_TEST_DEVICE before GoogleTest sees the flags.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "harness/testsupport/test_config.h"

int main(int argc, char** argv) {
  using softverbs::testsupport::configure_from_command_line;
  using softverbs::testsupport::test_config;

  std::string error;
  if (configure_from_command_line(argc, argv, error) != 0) {
    std::fprintf(stderr, "conformance_tests: %s\n", error.c_str());
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  const auto& config = test_config();
  std::printf("Device under test: %s, port %u, GID index %d\n",
              config.device_name.empty() ? "(none found)" : config.device_name.c_str(),
              config.port, config.gid_index);
  return RUN_ALL_TESTS();
}
