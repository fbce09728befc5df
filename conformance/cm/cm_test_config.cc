#include "conformance/cm/cm_test_config.h"

#include <arpa/inet.h>

#include <cstring>

namespace softverbs::conformance::cm {
namespace {

std::string& address_text() {
  static std::string text = "127.0.0.1";
  return text;
}

}  // namespace

bool make_ipv4(const char* text, uint16_t port, sockaddr_in& out) {
  std::memset(&out, 0, sizeof out);
  out.sin_family = AF_INET;
  out.sin_port = htons(port);
  return inet_pton(AF_INET, text, &out.sin_addr) == 1;
}

bool set_test_address(const std::string& text) {
  sockaddr_in parsed;
  if (!make_ipv4(text.c_str(), 0, parsed)) return false;
  address_text() = text;
  return true;
}

const std::string& test_address_text() { return address_text(); }

sockaddr_in test_address(uint16_t port) {
  sockaddr_in address;
  make_ipv4(address_text().c_str(), port, address);
  return address;
}

bool test_address_is_loopback() {
  return (ntohl(test_address().sin_addr.s_addr) >> 24) == 127;
}

std::string describe_address(const sockaddr* address) {
  if (address == nullptr) return "(null)";
  if (address->sa_family != AF_INET) return "(family " + std::to_string(address->sa_family) + ")";
  const auto* in = reinterpret_cast<const sockaddr_in*>(address);
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(in->sin_port));
}

}  // namespace softverbs::conformance::cm
