// The address both sides of every test use: the server binds and listens on
// it, the client resolves it. Set once in main() from --cm-address=IP, else
// the environment variable CM_TEST_ADDRESS, else 127.0.0.1. IPv4 only.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>

namespace softverbs::conformance::cm {

// Parses and keeps `text`; false if it is not a dotted IPv4 address.
bool set_test_address(const std::string& text);

const std::string& test_address_text();

// The test address with `port` (host byte order; 0 lets the CM choose).
sockaddr_in test_address(uint16_t port = 0);

// 127.0.0.0/8. The kernel's CM treats a loopback address like the any
// address when binding (cma_any_addr): no device is attached, and a port
// conflict is EADDRNOTAVAIL rather than EADDRINUSE.
bool test_address_is_loopback();

// An IPv4 address in `text` with `port`; false if it does not parse.
bool make_ipv4(const char* text, uint16_t port, sockaddr_in& out);

// A.B.C.D:PORT of an IPv4 sockaddr, "(family N)" of anything else.
std::string describe_address(const sockaddr* address);

}  // namespace softverbs::conformance::cm
