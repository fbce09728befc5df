#include "emulator/host/roce_port.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

namespace softverbs {
namespace {

Gid v4(const char* text) {
  in_addr address{};
  inet_pton(AF_INET, text, &address);
  return ipv4_mapped_gid(address.s_addr);
}

Gid v6(const char* text) {
  Gid gid{};
  inet_pton(AF_INET6, text, gid.data());
  return gid;
}

std::vector<HostInterface> two_interfaces() {
  HostInterface lo{"lo", 1, 65536, true, {v4("127.0.0.1"), v6("::1")}};
  HostInterface eth{"eth0", 2, 1500, false, {v4("192.0.2.2"), v6("fd00::2")}};
  return {lo, eth};
}

TEST(RoceMtu, TheLargestIbMtuWhosePacketFitsTheFrame) {
  EXPECT_EQ(roce_mtu(1500), Mtu::k1024);   // 1500 - 96 headers = 1404
  EXPECT_EQ(roce_mtu(4200), Mtu::k4096);   // exactly 4096 + 96 would do
  EXPECT_EQ(roce_mtu(4191), Mtu::k2048);
  EXPECT_EQ(roce_mtu(9000), Mtu::k4096);
  EXPECT_EQ(roce_mtu(65536), Mtu::k4096);
  EXPECT_EQ(roce_mtu(608), Mtu::k512);
  EXPECT_EQ(roce_mtu(576), Mtu::k256);
  EXPECT_EQ(roce_mtu(0), Mtu::k256);
}

TEST(RocePort, Softverbs0HoldsEveryHostAddressAfterItsDefaultGid) {
  const Gid default_gid = v6("fe80::253:56ff:fe00:1");
  RocePort port = roce_port(0, default_gid, two_interfaces(), 16);
  ASSERT_EQ(port.gids.size(), 5u);
  EXPECT_EQ(port.gids[0].gid, default_gid);
  EXPECT_EQ(port.gids[0].netdev, "eth0") << "the default GID names the first real interface";
  EXPECT_EQ(port.gids[0].ifindex, 2u);
  EXPECT_EQ(port.gids[1].gid, v4("127.0.0.1"));
  EXPECT_EQ(port.gids[1].netdev, "lo");
  EXPECT_EQ(port.gids[1].ifindex, 1u);
  EXPECT_EQ(port.gids[2].gid, v6("::1"));
  EXPECT_EQ(port.gids[3].gid, v4("192.0.2.2"));
  EXPECT_EQ(port.gids[3].netdev, "eth0");
  EXPECT_EQ(port.gids[4].gid, v6("fd00::2"));
  EXPECT_EQ(port.active_mtu, Mtu::k1024) << "a packet to any of its addresses must fit";
  EXPECT_EQ(port.net_devices, std::vector<std::string>{"eth0"}) << "no HCA sits under lo";
}

TEST(RocePort, TheTableHoldsNoMoreThanItsLength) {
  RocePort port = roce_port(0, v6("fe80::1"), two_interfaces(), 3);
  ASSERT_EQ(port.gids.size(), 3u);
  EXPECT_EQ(port.gids[2].gid, v6("::1"));
}

TEST(RocePort, LaterDevicesHoldALoopbackAddressOfTheirOwn) {
  RocePort second = roce_port(1, v6("fe80::2"), two_interfaces(), 16);
  ASSERT_EQ(second.gids.size(), 2u);
  EXPECT_EQ(second.gids[0].gid, v6("fe80::2"));
  EXPECT_EQ(second.gids[1].gid, v4("127.0.0.2"));
  EXPECT_EQ(second.gids[1].netdev, "lo");
  EXPECT_EQ(second.gids[1].ifindex, 1u);
  EXPECT_EQ(second.active_mtu, Mtu::k4096);
  EXPECT_TRUE(second.net_devices.empty()) << "one alias of lo is not lo's interface";
  EXPECT_EQ(roce_port(3, v6("fe80::4"), two_interfaces(), 16).gids[1].gid, v4("127.0.0.4"));
}

TEST(HostInterfaces, LoopbackIsUpWithItsAddress) {
  const auto interfaces = host_interfaces();
  const HostInterface* loopback = nullptr;
  for (const auto& interface : interfaces)
    if (interface.loopback) loopback = &interface;
  ASSERT_NE(loopback, nullptr) << "every Linux host has an up loopback interface";
  EXPECT_NE(loopback->ifindex, 0u);
  EXPECT_GT(loopback->mtu, 0u);
  bool has_127 = false;
  for (const Gid& gid : loopback->addresses) has_127 |= gid == v4("127.0.0.1");
  EXPECT_TRUE(has_127);
}

}  // namespace
}  // namespace softverbs
