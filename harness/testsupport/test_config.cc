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

// A number option's value, stored by `set` once it is in [low, high].
template <auto low, auto high, auto set>
Errno number_option(std::string_view name, const char* value, TestConfig& config,
                    std::string& error) {
  long number = 0;
  if (Errno err = parse_number(name, value, low, high, number, error)) return err;
  set(config, number);
  return 0;
}

// Each option: its flag, the environment variable that sets it when the
// flag is absent (if any), and how its value is taken.
struct Option {
  std::string_view flag;
  const char* environment;
  Errno (*apply)(std::string_view name, const char* value, TestConfig& config,
                 std::string& error);
};

constexpr Option kOptions[] = {
    {"--device", "SOFTVERBS_TEST_DEVICE",
     [](std::string_view, const char* value, TestConfig& config, std::string&) -> Errno {
       config.device_name = value;
       return 0;
     }},
    {"--port", nullptr,
     number_option<1, 255, [](TestConfig& c, long n) { c.port = static_cast<uint8_t>(n); }>},
    {"--gid-index", "SOFTVERBS_TEST_GID_INDEX",
     number_option<0, 0xffff, [](TestConfig& c, long n) { c.gid_index = static_cast<int>(n); }>},
    {"--peer", "SOFTVERBS_TEST_PEER",
     [](std::string_view, const char* value, TestConfig& config, std::string& error) {
       config.peer = value;
       return check_peer(config.peer, error);
     }},
    {"--serve-peers", nullptr,
     number_option<1, 65535,
                   [](TestConfig& c, long n) { c.serve_port = static_cast<uint16_t>(n); }>},
    {"--serve-seconds", nullptr,
     number_option<1, 86400,
                   [](TestConfig& c, long n) { c.serve_seconds = static_cast<int>(n); }>},
};

// The option `arg` names, as `--flag` or `--flag=VALUE`, if any.
const Option* option_named_by(std::string_view arg) {
  for (const Option& o : kOptions)
    if (arg == o.flag ||
        (arg.starts_with(o.flag) && arg.size() > o.flag.size() && arg[o.flag.size()] == '='))
      return &o;
  return nullptr;
}

}  // namespace

Errno configure_from_command_line(int& argc, char** argv, std::string& error) {
  TestConfig& config = mutable_config();
  for (const Option& o : kOptions)
    if (const char* env = o.environment ? std::getenv(o.environment) : nullptr; env && *env) {
      if (Errno err = o.apply(o.environment, env, config, error)) return err;
    }

  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const Option* option = option_named_by(arg);
    if (!option) {
      argv[kept++] = argv[i];
      continue;
    }
    const char* value;
    if (arg.size() > option->flag.size()) {
      value = argv[i] + option->flag.size() + 1;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      error = std::string(option->flag) + " needs a value";
      return EINVAL;
    }
    if (Errno err = option->apply(option->flag, value, config, error)) return err;
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
