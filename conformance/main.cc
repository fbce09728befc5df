// Entry point of the conformance suite: picks the device under test, its
// port and GID, and where two-process tests find their peer (test_config.h)
// before GoogleTest sees the flags; with --serve-peers it serves the peers
// of another host's run instead of running tests.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "harness/testsupport/remote_peer.h"
#include "harness/testsupport/test_config.h"

int main(int argc, char** argv) {
  using softverbs::testsupport::configure_from_command_line;
  using softverbs::testsupport::test_config;

  std::string error;
  if (configure_from_command_line(argc, argv, error) != 0) {
    std::fprintf(stderr, "conformance_tests: %s\n", error.c_str());
    return 2;
  }
  const auto& config = test_config();
  if (config.serve_port != 0)
    return softverbs::testsupport::serve_remote_peers(
        config.serve_port, std::chrono::seconds(config.serve_seconds));
  ::testing::InitGoogleTest(&argc, argv);
  std::printf("Device under test: %s, port %u, GID index %d; peer: %s\n",
              config.device_name.empty() ? "(none found)" : config.device_name.c_str(),
              config.port, config.gid_index,
              config.peer.empty() ? "a forked process" : config.peer.c_str());
  return RUN_ALL_TESTS();
}
