// Which device, port and GID the tests run on, and where the other side of
// a two-process test lives. Chosen at run time so one binary serves
// softverbs, rxe and real HCAs, on one host or two.
#pragma once

#include <cstdint>
#include <string>

#include "harness/testsupport/errors.h"

namespace softverbs::testsupport {

struct TestConfig {
  std::string device_name;  // empty until resolved: the first listed device
  uint8_t port = 1;
  int gid_index = 0;
  // HOST:PORT of a `--serve-peers` run on another host that serves the
  // peer side of two-process tests; empty: the peer is a forked process.
  std::string peer;
  // Set: this run only serves peers on that TCP port (see remote_peer.h),
  // for serve_seconds, and runs no test.
  uint16_t serve_port = 0;
  int serve_seconds = 1800;
};

// Reads SOFTVERBS_TEST_DEVICE, SOFTVERBS_TEST_GID_INDEX and
// SOFTVERBS_TEST_PEER, then takes these flags out of argv (a flag wins over
// the environment), each as `--flag=VALUE` or `--flag VALUE`:
//   --device NAME, --port N, --gid-index N, --peer HOST:PORT,
//   --serve-peers PORT, --serve-seconds N.
// Call before InitGoogleTest. On EINVAL `error` says what is wrong.
Errno configure_from_command_line(int& argc, char** argv, std::string& error);

// The configuration. The device name is resolved on first use: when none
// was given, it is the first device ibv_get_device_list returns (empty when
// there is none).
const TestConfig& test_config();

// Whether the peer of two-process tests runs on another host: tests that
// need it as a forked child of their own (a body of their own, its pid,
// memory shared with it) skip then.
bool peer_is_remote();

}  // namespace softverbs::testsupport
