#include "emulator/cm/cma_ip_header.h"

#include <algorithm>
#include <cstring>

#include "emulator/packet/byte_order.h"

namespace softverbs::cm {
namespace {

using namespace packet::wire_order;

constexpr size_t kPortOffset = 2;
constexpr size_t kSourceOffset = 4;
constexpr size_t kDestinationOffset = 20;
constexpr size_t kIpv4Offset = 12;  // inside a 16-byte address

bool valid_ip_version(uint8_t version) { return version == 4 || version == 6; }

void put_address(uint8_t* p, uint8_t ip_version, const CmaAddress& address) {
  if (ip_version == 4) {
    std::memset(p, 0, kIpv4Offset);
    std::memcpy(p + kIpv4Offset, address.data() + kIpv4Offset, 4);
  } else {
    std::memcpy(p, address.data(), address.size());
  }
}

CmaAddress get_address(const uint8_t* p, uint8_t ip_version) {
  CmaAddress address{};
  if (ip_version == 4) {
    std::memcpy(address.data() + kIpv4Offset, p + kIpv4Offset, 4);
  } else {
    std::memcpy(address.data(), p, address.size());
  }
  return address;
}

}  // namespace

bool parse_rdma_ip_service_id(uint64_t service_id, RdmaIpService& out) {
  const uint64_t prefix = service_id & kRdmaIpPortSpaceMask;
  const uint16_t port = static_cast<uint16_t>(service_id);
  for (RdmaPortSpace space :
       {RdmaPortSpace::kTcp, RdmaPortSpace::kUdp, RdmaPortSpace::kIb}) {
    if (prefix == rdma_ip_service_id(space, 0)) {
      out = {space, port};
      return true;
    }
  }
  return false;
}

CmaAddress cma_ipv4_address(std::array<uint8_t, 4> ipv4) {
  CmaAddress address{};
  std::copy(ipv4.begin(), ipv4.end(), address.begin() + kIpv4Offset);
  return address;
}

const char* to_string(CmaHeaderError error) {
  switch (error) {
    case CmaHeaderError::kNone: return "none";
    case CmaHeaderError::kTruncated: return "shorter than the CMA IP header";
    case CmaHeaderError::kBadCmVersion: return "CMA version is not 0";
    case CmaHeaderError::kBadIpVersion: return "IP version is neither 4 nor 6";
  }
  return "unknown";
}

CmaHeaderError encode_cma_ip_header(const CmaIpHeader& header,
                                    std::span<uint8_t> private_data) {
  if (private_data.size() < kCmaIpHeaderBytes) return CmaHeaderError::kTruncated;
  if (!valid_ip_version(header.ip_version)) return CmaHeaderError::kBadIpVersion;
  uint8_t* p = private_data.data();
  p[0] = kCmaVersion;
  p[1] = static_cast<uint8_t>(header.ip_version << 4);
  store_be16(p + kPortOffset, header.source_port);
  put_address(p + kSourceOffset, header.ip_version, header.source);
  put_address(p + kDestinationOffset, header.ip_version, header.destination);
  return CmaHeaderError::kNone;
}

CmaHeaderError decode_cma_ip_header(std::span<const uint8_t> private_data,
                                    CmaIpHeader& out) {
  if (private_data.size() < kCmaIpHeaderBytes) return CmaHeaderError::kTruncated;
  const uint8_t* p = private_data.data();
  if (p[0] != kCmaVersion) return CmaHeaderError::kBadCmVersion;
  const uint8_t ip_version = p[1] >> 4;
  if (!valid_ip_version(ip_version)) return CmaHeaderError::kBadIpVersion;
  out.ip_version = ip_version;
  out.source_port = load_be16(p + kPortOffset);
  out.source = get_address(p + kSourceOffset, ip_version);
  out.destination = get_address(p + kDestinationOffset, ip_version);
  return CmaHeaderError::kNone;
}

}  // namespace softverbs::cm
