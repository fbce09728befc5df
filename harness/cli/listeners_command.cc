#include "harness/cli/listeners_command.h"

#include <arpa/inet.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "emulator/cm/cma_ip_header.h"
#include "emulator/host/cm_port_directory.h"
#include "emulator/host/host_interfaces.h"
#include "emulator/wire/shm_registry.h"
#include "harness/cli/exit_codes.h"
#include "harness/cli/usage.h"

namespace softverbs::cli {
namespace {

constexpr uint16_t kPortSpaceIpoib = 0x0002;  // RDMA_PS_IPOIB: no IP service ID of its own

const char* port_space_name(uint16_t port_space) {
  switch (port_space) {
    case static_cast<uint16_t>(cm::RdmaPortSpace::kTcp): return "tcp";
    case static_cast<uint16_t>(cm::RdmaPortSpace::kUdp): return "udp";
    case static_cast<uint16_t>(cm::RdmaPortSpace::kIb): return "ib";
    case kPortSpaceIpoib: return "ipoib";
    default: return "?";
  }
}

// "127.0.0.1", "::1", or "*" for the any address.
std::string address_text(const Gid& address) {
  if (is_any_address(address)) return "*";
  char text[INET6_ADDRSTRLEN];
  if (is_ipv4_mapped(address)) return inet_ntop(AF_INET, address.data() + 12, text, sizeof text);
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
