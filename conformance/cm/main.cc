// Entry point of the librdmacm conformance suite. The address every test
// uses comes from --cm-address=IP, else CM_TEST_ADDRESS, else 127.0.0.1.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "conformance/cm/cm_test_config.h"

namespace {

constexpr const char kAddressFlag[] = "--cm-address=";

// The address flag's value, removed from argv; else the environment's.
std::string take_address(int& argc, char** argv) {
  const char* from_env = std::getenv("CM_TEST_ADDRESS");
  std::string address = from_env != nullptr ? from_env : "127.0.0.1";
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], kAddressFlag, sizeof kAddressFlag - 1) == 0)
      address = argv[i] + sizeof kAddressFlag - 1;
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  argv[argc] = nullptr;
  return address;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string address = take_address(argc, argv);
  if (!softverbs::conformance::cm::set_test_address(address)) {
    std::fprintf(stderr, "cm_conformance_tests: %s is not an IPv4 address\n", address.c_str());
    return 2;
  }
  ::testing::InitGoogleTest(&argc, argv);
  std::printf("CM test address: %s\n", address.c_str());
  return RUN_ALL_TESTS();
}
