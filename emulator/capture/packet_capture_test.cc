// The capture file read back byte by byte: pcapng blocks, Ethernet, IP and
// UDP headers as a network would carry them, a RoCEv2 ICRC that checks (or,
// for a corrupted frame, does not), comments for faults, filters, the limit.
#include "emulator/capture/packet_capture.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "emulator/packet/byte_order.h"
#include "emulator/packet/codec.h"
#include "emulator/packet/icrc.h"

namespace softverbs::capture {
namespace {

using fault::Direction;
using fault::FrameFate;
using namespace packet::wire_order;

struct Packet {
  std::vector<uint8_t> bytes;
  std::string comment;
  uint32_t flags = 0;
};

uint32_t u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The enhanced packet blocks of a pcapng file written on this machine.
std::vector<Packet> read_packets(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> file((std::istreambuf_iterator<char>(in)), {});
  std::vector<Packet> packets;
  for (size_t at = 0; at + 12 <= file.size();) {
    const uint32_t type = u32(&file[at]);
    const uint32_t length = u32(&file[at + 4]);
    if (length < 12 || at + length > file.size()) break;
    if (type == 6) {
      Packet p;
      const uint32_t captured = u32(&file[at + 20]);
      p.bytes.assign(file.begin() + at + 28, file.begin() + at + 28 + captured);
      for (size_t o = at + 28 + ((captured + 3) & ~3u); o + 4 <= at + length - 4;) {
        const uint16_t code = static_cast<uint16_t>(file[o] | file[o + 1] << 8);
        const uint16_t size = static_cast<uint16_t>(file[o + 2] | file[o + 3] << 8);
        if (code == 0) break;
        if (code == 1) p.comment.assign(reinterpret_cast<const char*>(&file[o + 4]), size);
        if (code == 2) p.flags = u32(&file[o + 4]);
        o += 4 + ((size + 3u) & ~3u);
      }
      packets.push_back(std::move(p));
    }
    at += length;
  }
  return packets;
}

Gid ipv4_gid(uint8_t last) {
  Gid g{};
  g[10] = g[11] = 0xff;
  g[12] = 10, g[15] = last;
  return g;
}

std::vector<uint8_t> frame(bool global, uint32_t dest_qp, bool ipv6 = false) {
  packet::Headers h;
  h.lrh.slid = 1;
  h.lrh.dlid = 1;
  if (global) {
    h.has_grh = true;
    h.grh.sgid = ipv6 ? Gid{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1} : ipv4_gid(1);
    h.grh.dgid = ipv6 ? Gid{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2} : ipv4_gid(2);
  }
  h.bth.opcode = packet::Opcode::kRcSendOnly;
  h.bth.dest_qp = dest_qp;
  h.bth.psn = 5;
  const std::vector<uint8_t> payload(40, 0xab);
  std::vector<uint8_t> f(packet::kMaxFrameBytes);
  f.resize(packet::encode_ib(h, payload, f));
  return f;
}

class Capture : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "capture-" + std::to_string(getpid()) + ".pcapng";
    std::remove(path_.c_str());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::unique_ptr<PacketCapture> open(CaptureFilter filter = {}, uint64_t limit = 1 << 20) {
    Errno err = 0;
    auto file = PcapngFile::create(path_, limit, err);
    EXPECT_TRUE(file) << err;
    return std::make_unique<PacketCapture>(path_, std::move(file), std::move(filter));
  }
  std::string path_;
};

// The ICRC at the end of an Ethernet packet checks against its IP header.
bool icrc_checks(const std::vector<uint8_t>& eth) {
  const std::span<const uint8_t> ip(eth.data() + 14, eth.size() - 14);
  return packet::icrc_roce_v2(ip.first(ip.size() - 4)) == packet::load_icrc(&ip[ip.size() - 4]);
}

TEST_F(Capture, ARoceFrameIsWrittenAsAnIpv4UdpPacketWithAValidIcrc) {
  auto capture = open();
  const std::vector<uint8_t> f = frame(true, 0x12);
  capture->observe(Direction::kTx, f, FrameFate::kPassed);
  const auto packets = read_packets(path_);
  ASSERT_EQ(packets.size(), 1u);
  const std::vector<uint8_t>& p = packets[0].bytes;
  ASSERT_EQ(p.size(), 14 + 20 + 8 + (f.size() - 48));
  EXPECT_EQ(load_be16(&p[12]), 0x0800);             // IPv4
  EXPECT_EQ(p[14 + 9], 17);                         // UDP
  EXPECT_EQ(std::memcmp(&p[14 + 12], &ipv4_gid(1)[12], 4), 0);
  EXPECT_EQ(load_be16(&p[14 + 20 + 2]), 4791);      // destination port
  uint32_t sum = 0;                                 // the IPv4 header checksum holds
  for (int i = 0; i < 20; i += 2) sum += load_be16(&p[14 + i]);
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  EXPECT_EQ(sum, 0xffffu);
  EXPECT_TRUE(icrc_checks(p));
  EXPECT_EQ(packets[0].flags, 2u);  // outbound
  EXPECT_TRUE(packets[0].comment.empty());
}

TEST_F(Capture, InfinibandAndIpv6FramesBecomeIpv6PacketsWithAValidIcrc) {
  auto capture = open();
  capture->observe(Direction::kRx, frame(false, 0x12), FrameFate::kPassed);
  capture->observe(Direction::kRx, frame(true, 0x12, true), FrameFate::kPassed);
  const auto packets = read_packets(path_);
  ASSERT_EQ(packets.size(), 2u);
  for (const Packet& p : packets) {
    EXPECT_EQ(load_be16(&p.bytes[12]), 0x86dd);
    EXPECT_TRUE(icrc_checks(p.bytes));
    EXPECT_EQ(p.flags, 1u);  // inbound
    EXPECT_NE(load_be16(&p.bytes[14 + 40 + 6]), 0);  // IPv6 needs the UDP checksum
  }
  // LID 1 is softverbs0's: the InfiniBand frame goes between its GID 0.
  EXPECT_EQ(packets[0].bytes[14 + 8], 0xfe);
  EXPECT_EQ(packets[0].bytes[14 + 9], 0x80);
}

TEST_F(Capture, FaultsAreCommentedAndACorruptedFrameKeepsABadIcrc) {
  auto capture = open();
  std::vector<uint8_t> f = frame(true, 0x12);
  capture->observe(Direction::kTx, f, FrameFate::kDropped);
  f[f.size() - 10] ^= 0x20;
  capture->observe(Direction::kTx, f, FrameFate::kCorrupted);
  capture->observe(Direction::kRx, f, FrameFate::kHeld);  // written when released
  capture->observe(Direction::kRx, frame(true, 0x12), FrameFate::kReleased);
  const auto packets = read_packets(path_);
  ASSERT_EQ(packets.size(), 3u);
  EXPECT_NE(packets[0].comment.find("dropped"), std::string::npos);
  EXPECT_NE(packets[1].comment.find("corrupted"), std::string::npos);
  EXPECT_FALSE(icrc_checks(packets[1].bytes));
  EXPECT_NE(packets[2].comment.find("delayed"), std::string::npos);
}

TEST_F(Capture, TheQpFilterKeepsOnlyItsQps) {
  CaptureFilter filter;
  filter.qpns = {0x12};
  auto capture = open(filter);
  capture->observe(Direction::kTx, frame(true, 0x12), FrameFate::kPassed);
  capture->observe(Direction::kTx, frame(true, 0x13), FrameFate::kPassed);
  EXPECT_EQ(read_packets(path_).size(), 1u);
}

TEST_F(Capture, WritingStopsAtTheLimitAndCountsWhatItLeftOut) {
  auto capture = open({}, 400);
  for (int i = 0; i < 5; ++i) capture->observe(Direction::kTx, frame(true, 0x12), FrameFate::kPassed);
  EXPECT_EQ(read_packets(path_).size(), capture->file().packets_written());
  EXPECT_LT(capture->file().packets_written(), 5u);
  EXPECT_GT(capture->file().packets_over_limit(), 0u);
}

TEST_F(Capture, AnExistingFileIsNotOverwritten) {
  { std::ofstream(path_) << "not ours"; }
  Errno err = 0;
  EXPECT_FALSE(PcapngFile::create(path_, 1 << 20, err));
  EXPECT_EQ(err, EEXIST);
}

TEST_F(Capture, AfterStopNothingMoreIsWrittenAndTheFileStaysReadable) {
  auto capture = open();
  capture->observe(Direction::kTx, frame(true, 0x12), FrameFate::kPassed);
  capture->stop();
  capture->observe(Direction::kTx, frame(true, 0x12), FrameFate::kPassed);
  EXPECT_EQ(read_packets(path_).size(), 1u);
  EXPECT_EQ(capture->file().packets_written(), 1u);
}

TEST_F(Capture, OpeningATakenPathWritesBesideItWithThePid) {
  { std::ofstream(path_) << "not ours"; }
  CaptureSettings settings;
  settings.path = path_;
  std::string error;
  auto capture = PacketCapture::open(settings, error);
  ASSERT_TRUE(capture) << error;
  EXPECT_NE(capture->path(), path_);
  EXPECT_NE(capture->path().find("-" + std::to_string(getpid()) + ".pcapng"), std::string::npos);
  capture->observe(Direction::kTx, frame(true, 0x12), FrameFate::kPassed);
  EXPECT_EQ(read_packets(capture->path()).size(), 1u);
  std::remove(capture->path().c_str());
}

TEST(CaptureSettingsText, QpListsAndLimitsAreChecked) {
  std::vector<uint32_t> qpns;
  EXPECT_TRUE(parse_qp_list("2,0x12", qpns));
  EXPECT_EQ(qpns, (std::vector<uint32_t>{2, 0x12}));
  for (const char* bad : {"", "x", "2,", "0x1000000", "2;3"}) {
    std::vector<uint32_t> none;
    EXPECT_FALSE(parse_qp_list(bad, none)) << bad;
  }
  uint64_t mib = 0;
  EXPECT_TRUE(parse_limit_mib("16", mib));
  EXPECT_EQ(mib, 16u);
  for (const char* bad : {"", "0", "1.5", "-3", "99999999999999999999"})
    EXPECT_FALSE(parse_limit_mib(bad, mib)) << bad;
  int index = -1;
  EXPECT_FALSE(find_device_index("no-such-device", index));
}

}  // namespace
}  // namespace softverbs::capture
