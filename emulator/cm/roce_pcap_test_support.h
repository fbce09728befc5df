// Test support: a MAD as a RoCEv2 datagram to QP1 in a pcap file, so that
// a packet analyser can be asked what it sees. Ethernet, IPv4, UDP 4791,
// BTH (UD SEND_ONLY to QP1) and DETH (the GSI Q_Key) come from fixed
// addresses; the BTH/DETH bytes and the ICRC come from the packet codec.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "emulator/cm/mad_header.h"
#include "emulator/packet/codec.h"
#include "emulator/packet/icrc.h"

namespace softverbs::cm::testing {

constexpr uint16_t kRoceV2Port = 4791;
constexpr uint32_t kGsiQkey = 0x80010000;  // IBTA: the well-known Q_Key of QP1
constexpr std::array<uint8_t, 4> kSourceIp = {192, 168, 1, 10};
constexpr std::array<uint8_t, 4> kDestinationIp = {192, 168, 1, 20};

inline void put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

// BTH and DETH as the packet codec lays them out (its IB frame minus the
// LRH in front and the ICRC behind).
inline std::vector<uint8_t> bth_deth_mad(std::span<const uint8_t, kMadBytes> mad,
                                         uint32_t psn) {
  packet::Headers h;
  h.bth.opcode = packet::Opcode::kUdSendOnly;
  h.bth.dest_qp = 1;
  h.bth.psn = psn;
  h.deth = {.qkey = kGsiQkey, .src_qp = 1};
  std::vector<uint8_t> frame(packet::kMaxFrameBytes);
  frame.resize(packet::encode_ib(h, mad, frame));
  if (frame.empty()) return {};
  return {frame.begin() + packet::kLrhBytes, frame.end() - packet::kIcrcBytes};
}

inline uint16_t ipv4_checksum(std::span<const uint8_t> header) {
  uint32_t sum = 0;
  for (size_t i = 0; i + 1 < header.size(); i += 2) sum += header[i] << 8 | header[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// One Ethernet frame: IPv4 / UDP 4791 / BTH DETH MAD / ICRC.
inline std::vector<uint8_t> roce_v2_frame(std::span<const uint8_t, kMadBytes> mad,
                                          uint32_t psn) {
  const std::vector<uint8_t> ib = bth_deth_mad(mad, psn);
  const uint16_t udp_bytes = static_cast<uint16_t>(8 + ib.size() + packet::kIcrcBytes);
  std::vector<uint8_t> f = {0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00};
  const size_t ip = f.size();
  f.insert(f.end(), {0x45, 0x00});
  put16(f, static_cast<uint16_t>(20 + udp_bytes));
  f.insert(f.end(), {0x00, 0x00, 0x40, 0x00, 64, 17, 0x00, 0x00});
  f.insert(f.end(), kSourceIp.begin(), kSourceIp.end());
  f.insert(f.end(), kDestinationIp.begin(), kDestinationIp.end());
  const uint16_t checksum = ipv4_checksum(std::span(f).subspan(ip, 20));
  f[ip + 10] = static_cast<uint8_t>(checksum >> 8);
  f[ip + 11] = static_cast<uint8_t>(checksum);
  put16(f, 0xc000);  // UDP source port
  put16(f, kRoceV2Port);
  put16(f, udp_bytes);
  put16(f, 0);  // no UDP checksum
  f.insert(f.end(), ib.begin(), ib.end());
  std::array<uint8_t, packet::kIcrcBytes> icrc;
  packet::store_icrc(icrc.data(), packet::icrc_roce_v2(std::span(f).subspan(ip)));
  f.insert(f.end(), icrc.begin(), icrc.end());
  return f;
}

// Writes classic pcap (microsecond timestamps, LINKTYPE_ETHERNET), host
// byte order as the format allows. False on an I/O error.
inline bool write_pcap(const std::string& path,
                       const std::vector<std::vector<uint8_t>>& frames) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) return false;
  struct {
    uint32_t magic = 0xa1b2c3d4;
    uint16_t version_major = 2;
    uint16_t version_minor = 4;
    int32_t this_zone = 0;
    uint32_t sigfigs = 0;
    uint32_t snaplen = 65535;
    uint32_t linktype = 1;  // Ethernet
  } global;
  bool ok = std::fwrite(&global, sizeof global, 1, file) == 1;
  uint32_t seconds = 1;
  for (const std::vector<uint8_t>& frame : frames) {
    const uint32_t size = static_cast<uint32_t>(frame.size());
    const uint32_t record[4] = {seconds++, 0, size, size};
    ok = ok && std::fwrite(record, sizeof record, 1, file) == 1;
    ok = ok && std::fwrite(frame.data(), 1, frame.size(), file) == frame.size();
  }
  return std::fclose(file) == 0 && ok;
}

}  // namespace softverbs::cm::testing
