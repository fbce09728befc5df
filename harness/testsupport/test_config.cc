#include "harness/testsupport/test_config.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace softverbs::testsupport {
namespace {

TestConfig& mutable_config() {
  static TestConfig config;
  return config;
}

bool& device_resolved() {
  static bool resolved = false;
  return resolved;
}

std::string first_listed_device() {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (!list) return {};
  std::string name = count > 0 && list[0] ? ibv_get_device_name(list[0]) : "";
  ibv_free_device_list(list);
  return name;
}

// A whole decimal number in [low, high], or EINVAL with `error` naming `what`.
Errno parse_number(std::string_view what, const char* text, long low, long high, long& out,
                   std::string& error) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < low || value > high) {
    error = std::string(what) + "='" + text + "' is not a number from " + std::to_string(low) +
            " to " + std::to_string(high);
    return EINVAL;
  }
  out = value;
  return 0;
}

// HOST:PORT, HOST naming an IPv4 or IPv6 address or a host name ([...] for
// an IPv6 address with its port).
Errno check_peer(const std::string& peer, std::string& error) {
  const size_t colon = peer.rfind(':');
  long port = 0;
  if (colon == std::string::npos || colon == 0 ||
      parse_number("the peer's port", peer.c_str() + colon + 1, 1, 65535, port, error) != 0) {
    error = "--peer '" + peer + "' is not HOST:PORT (e.g. --peer 198.18.0.2:18515)";
    return EINVAL;
  }
  return 0;
}

// Applies one flag's value to `config`.
Errno apply_flag(std::string_view flag, const char* value, TestConfig& config,
                 std::string& error) {
  long number = 0;
  if (flag == "--device") {
    config.device_name = value;
  } else if (flag == "--port") {
    if (Errno err = parse_number("--port", value, 1, 255, number, error)) return err;
    config.port = static_cast<uint8_t>(number);
  } else if (flag == "--gid-index") {
    if (Errno err = parse_number("--gid-index", value, 0, 0xffff, number, error)) return err;
    config.gid_index = static_cast<int>(number);
  } else if (flag == "--peer") {
    config.peer = value;
    return check_peer(config.peer, error);
  } else if (flag == "--serve-peers") {
    if (Errno err = parse_number("--serve-peers", value, 1, 65535, number, error)) return err;
    config.serve_port = static_cast<uint16_t>(number);
  } else if (flag == "--serve-seconds") {
    if (Errno err = parse_number("--serve-seconds", value, 1, 86400, number, error)) return err;
    config.serve_seconds = static_cast<int>(number);
  }
  return 0;
}

constexpr std::string_view kFlags[] = {"--device",    "--port",          "--gid-index",
                                       "--peer",      "--serve-peers",   "--serve-seconds"};

}  // namespace

Errno configure_from_command_line(int& argc, char** argv, std::string& error) {
  TestConfig& config = mutable_config();
  if (const char* env = std::getenv("SOFTVERBS_TEST_DEVICE"); env && *env)
    config.device_name = env;
  if (const char* env = std::getenv("SOFTVERBS_TEST_GID_INDEX"); env && *env) {
    long index = 0;
    if (Errno err = parse_number("SOFTVERBS_TEST_GID_INDEX", env, 0, 0xffff, index, error))
      return err;
    config.gid_index = static_cast<int>(index);
  }
  if (const char* env = std::getenv("SOFTVERBS_TEST_PEER"); env && *env) {
    config.peer = env;
    if (Errno err = check_peer(config.peer, error)) return err;
  }

  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const std::string_view* flag = nullptr;
    for (const std::string_view& f : kFlags)
      if (arg == f || (arg.starts_with(f) && arg.size() > f.size() && arg[f.size()] == '='))
        flag = &f;
    if (!flag) {
      argv[kept++] = argv[i];
      continue;
    }
    const char* value;
    if (arg.size() > flag->size()) {
      value = argv[i] + flag->size() + 1;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      error = std::string(*flag) + " needs a value";
      return EINVAL;
    }
    if (Errno err = apply_flag(*flag, value, config, error)) return err;
  }
  argc = kept;
  argv[argc] = nullptr;
  if (!config.device_name.empty()) device_resolved() = true;
  return 0;
}

bool peer_is_remote() { return !test_config().peer.empty(); }

const TestConfig& test_config() {
  TestConfig& config = mutable_config();
  if (!device_resolved()) {
    config.device_name = first_listed_device();
    device_resolved() = true;
  }
  return config;
}

}  // namespace softverbs::testsupport
