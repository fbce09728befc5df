#include "harness/cli/listeners_command.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "emulator/wire/shm_registry.h"
#include "harness/cli/exit_codes.h"
#include "harness/cli/usage.h"

namespace softverbs::cli {
namespace {

const char* port_space_name(uint16_t port_space) {
  switch (port_space) {
    case 0x0106: return "tcp";
    case 0x0111: return "udp";
    case 0x013f: return "ib";
    case 0x0002: return "ipoib";
    default: return "?";
  }
}

// "127.0.0.1", "::1", or "*" for the any address.
std::string address_text(const Gid& address) {
  bool any = true;
  for (uint8_t byte : address) any = any && byte == 0;
  if (any) return "*";
  char text[INET6_ADDRSTRLEN];
  bool mapped = address[10] == 0xff && address[11] == 0xff;
  for (size_t i = 0; i < 10; ++i) mapped = mapped && address[i] == 0;
  if (mapped) return inet_ntop(AF_INET, address.data() + 12, text, sizeof text);
  return std::string("[") + inet_ntop(AF_INET6, address.data(), text, sizeof text) + "]";
}

}  // namespace

int listeners_command(std::span<char* const> args) {
  for (const char* arg : args) {
    const std::string_view word = arg;
    if (word == "-h" || word == "--help") {
      print_listeners_usage(stdout);
      return kExitSuccess;
    }
    return usage_error("listeners: unexpected argument '" + std::string(word) + "'",
                       "type: softverbs listeners");
  }
  Errno err = 0;
  auto registry = ShmRegistry::attach(err);
  if (!registry) {
    std::fprintf(stderr, "softverbs: cannot read the shared registry (%s)\n", std::strerror(err));
    return kExitFailure;
  }
  std::printf("%-6s %-42s %7s\n", "space", "address:port", "pid");
  for (const ShmRegistry::CmBinding& b : registry->cm_listeners()) {
    const std::string where = address_text(b.address) + ":" + std::to_string(b.port);
    std::printf("%-6s %-42s %7u\n", port_space_name(b.port_space), where.c_str(), b.pid);
  }
  return kExitSuccess;
}

}  // namespace softverbs::cli
