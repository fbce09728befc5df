#include "harness/testsupport/test_config.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
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

Errno parse_gid_index(const char* text, int& out, std::string& error) {
  char* end = nullptr;
  errno = 0;
  long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0 || value > 0xffff) {
    error = std::string("SOFTVERBS_TEST_GID_INDEX='") + text + "' is not a GID index";
    return EINVAL;
  }
  out = static_cast<int>(value);
  return 0;
}

}  // namespace

Errno configure_from_command_line(int& argc, char** argv, std::string& error) {
  TestConfig& config = mutable_config();
  if (const char* env = std::getenv("SOFTVERBS_TEST_DEVICE"); env && *env)
    config.device_name = env;
  if (const char* env = std::getenv("SOFTVERBS_TEST_GID_INDEX"); env && *env) {
    if (Errno err = parse_gid_index(env, config.gid_index, error)) return err;
  }

  constexpr std::string_view kFlag = "--device";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.starts_with(kFlag) && arg.size() > kFlag.size() && arg[kFlag.size()] == '=') {
      config.device_name = std::string(arg.substr(kFlag.size() + 1));
    } else if (arg == kFlag) {
      if (i + 1 >= argc) {
        error = "--device needs a device name";
        return EINVAL;
      }
      config.device_name = argv[++i];
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  if (!config.device_name.empty()) device_resolved() = true;
  return 0;
}

const TestConfig& test_config() {
  TestConfig& config = mutable_config();
  if (!device_resolved()) {
    config.device_name = first_listed_device();
    device_resolved() = true;
  }
  return config;
}

}  // namespace softverbs::testsupport
