// What the RDMA CM (Linux's rdma_cm, and librdmacm above it) adds to the IB
// CM for IP-addressed connections: the IP port space encoded in the service
// ID, and a 36-byte header at the start of the private data of a REQ or
// SIDR_REQ that carries the IP addresses and the source port (IBTA Annex
// A11, "RDMA IP CM Service"; Linux: struct cma_hdr in
// drivers/infiniband/core/cma.c). The header is absent when the addresses
// are native IB ones (AF_IB); the consumer's own private data follows it,
// 56 bytes at most in a REQ.
//
// Layout, big-endian:
//   byte 0: CM version (0x00)
//   byte 1: IP version (4 or 6) in bits 7:4; bits 3:0 reserved
//   bytes 2-3: source port
//   bytes 4-19: source address; bytes 20-35: destination address. An IPv4
//   address takes the last 4 of its 16 bytes, the first 12 being zero.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace softverbs::cm {

// ---- Service IDs ------------------------------------------------------

// RDMA CM port spaces (librdmacm's enum rdma_port_space) that map to
// service IDs 0x0000000001PP0000 | port, PP the IP protocol number (0x3f:
// "any local network" for RDMA_PS_IB).
enum class RdmaPortSpace : uint16_t { kTcp = 0x0106, kUdp = 0x0111, kIb = 0x013f };

constexpr uint64_t kRdmaIpServiceIdTcp = 0x0000000001060000;  // RDMA_IB_IP_PS_TCP
constexpr uint64_t kRdmaIpServiceIdUdp = 0x0000000001110000;  // RDMA_IB_IP_PS_UDP
constexpr uint64_t kRdmaIpServiceIdIb = 0x00000000013f0000;   // RDMA_IB_IP_PS_IB
constexpr uint64_t kRdmaIpPortSpaceMask = 0xffffffffffff0000;  // RDMA_IB_IP_PS_MASK

constexpr uint64_t rdma_ip_service_id(RdmaPortSpace space, uint16_t port) {
  return uint64_t{static_cast<uint16_t>(space)} << 16 | port;
}

struct RdmaIpService {
  RdmaPortSpace space;
  uint16_t port;
};

// Splits a service ID into port space and port. False when it is not one
// of the three IP port spaces (`out` then unchanged).
bool parse_rdma_ip_service_id(uint64_t service_id, RdmaIpService& out);

// ---- The IP header in the private data --------------------------------

constexpr size_t kCmaIpHeaderBytes = 36;
constexpr uint8_t kCmaVersion = 0x00;

// 16 bytes, network order; IPv4 as 12 zero bytes and then the address.
using CmaAddress = std::array<uint8_t, 16>;

CmaAddress cma_ipv4_address(std::array<uint8_t, 4> ipv4);

struct CmaIpHeader {
  uint8_t ip_version = 4;  // 4 or 6
  uint16_t source_port = 0;
  CmaAddress source{};
  CmaAddress destination{};

  bool operator==(const CmaIpHeader&) const = default;
};

enum class CmaHeaderError : uint8_t {
  kNone,
  kTruncated,      // fewer than 36 bytes
  kBadCmVersion,   // byte 0 is not 0x00
  kBadIpVersion,   // neither 4 nor 6
};

const char* to_string(CmaHeaderError error);

// Writes the 36 bytes at the start of `private_data` (a REQ's or a
// SIDR_REQ's). For IPv4 the first 12 bytes of each address are written as
// zero, whatever `header` holds there.
CmaHeaderError encode_cma_ip_header(const CmaIpHeader& header,
                                    std::span<uint8_t> private_data);

// Reads the header at the start of `private_data`. For IPv4 only the last
// 4 bytes of each address are read (the rest comes back zero), as the
// kernel does. `out` is written only on success.
CmaHeaderError decode_cma_ip_header(std::span<const uint8_t> private_data,
                                    CmaIpHeader& out);

}  // namespace softverbs::cm
