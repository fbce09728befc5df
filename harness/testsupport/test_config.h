// Which device, port and GID the tests run on. Chosen at run time so one
// binary serves softverbs, rxe and real HCAs.
#pragma once

#include <cstdint>
#include <string>

#include "harness/testsupport/errors.h"

namespace softverbs::testsupport {

struct TestConfig {
  std::string device_name;  // empty until resolved: the first listed device
  uint8_t port = 1;
  int gid_index = 0;
};

// Reads SOFTVERBS_TEST_DEVICE and SOFTVERBS_TEST_GID_INDEX, then takes
// `--device=NAME` (or `--device NAME`) out of argv; the flag wins over the
// environment. Call before InitGoogleTest. On EINVAL `error` says why.
Errno configure_from_command_line(int& argc, char** argv, std::string& error);

// The configuration. The device name is resolved on first use: when none
// was given, it is the first device ibv_get_device_list returns (empty when
// there is none).
const TestConfig& test_config();

}  // namespace softverbs::testsupport
